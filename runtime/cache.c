/*
 * cache.c -- the on-disk kernel cache (the promises are numbered in cache.h).
 *
 *   get:  open KEY.kfc -> check header, length, key, CRC -> hit (touch mtime)
 *                                    \-> corrupt: report, remove, miss
 *   put:  .tmp-KEY-PID-NS (O_EXCL, 0600) -> write -> fsync -> rename to KEY.kfc
 *         -> fsync dir -> evict LRU to fit the cap
 *   get_or_compute: get -> lock KEY.lock (O_EXCL) -> get again -> compute -> put
 *                   -> unlock;  busy: break if stale, else back off, poll, retry
 *
 * Every file is reached through the directory's fd (openat and friends), so a
 * directory renamed or replaced after kf_cache_open cannot redirect a write.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cache.h"
#include "runtime/hash.h"

#define ENTRY_SUFFIX ".kfc"
#define LOCK_SUFFIX ".lock"
#define TMP_PREFIX ".tmp-"
#define BROKEN_PREFIX ".broken-"
#define HEADER_BYTES 64
#define FORMAT_VERSION 1u
static const char entry_magic[8] = {'K', 'F', 'C', 'A', 'C', 'H', 'E', 0};

/* Longest file name the cache makes: prefix, key, pid, nanoseconds, suffix. */
#define NAME_MAX_KF 256

struct kf_cache {
    kf_mem mem;
    int dirfd;
    char *dir; /* strlen + 1 bytes */
    unsigned flags;
    uint64_t max_bytes;
    uint32_t lock_wait_ms, stale_lock_ms;
};

/* ------------------------------------------------------------------------ */
/* Messages and small helpers                                                 */
/* ------------------------------------------------------------------------ */

static kf_status fail(kf_cache_msg *msg, kf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kf_status fail(kf_cache_msg *msg, kf_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg->error, sizeof msg->error, fmt, ap);
    va_end(ap);
    return status;
}

static void note(kf_cache_msg *msg, unsigned event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(kf_cache_msg *msg, unsigned event, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg->note, sizeof msg->note, fmt, ap);
    va_end(ap);
    msg->events |= event;
}

static void msg_reset(kf_cache_msg *msg) {
    msg->error[0] = 0;
    msg->note[0] = 0;
    msg->events = 0;
    msg->store = KF_CACHE_STORE_NONE;
    msg->store_error[0] = 0;
}

/* Records a failed store (msg->error holds why) and returns `st`. */
static kf_status store_failed(kf_cache_msg *msg, kf_status st) {
    msg->store = KF_CACHE_STORE_FAILED;
    snprintf(msg->store_error, sizeof msg->store_error, "%s", msg->error);
    return st;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t mtime_ns(const struct stat *st) {
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static void sleep_ms(uint32_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Sets atime and mtime to the precise current time. File systems stamp files
 * from a coarse clock (a few ms), which would make LRU order a tie. */
static void touch_fd(int fd) {
    int64_t t = now_ns();
    struct timespec ts[2] = {{.tv_sec = t / 1000000000, .tv_nsec = t % 1000000000},
                             {.tv_sec = t / 1000000000, .tv_nsec = t % 1000000000}};
    (void)futimens(fd, ts);
}

static bool write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads exactly `len` bytes at `off`; false on error or a short file. */
static bool pread_all(int fd, void *data, size_t len, off_t off) {
    char *p = data;
    while (len) {
        ssize_t n = pread(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return true;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool is_hex64(const char *s) {
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* True when `name` is KEY + `suffix` (KEY: 64 lower-case hex digits). */
static bool is_key_file(const char *name, const char *suffix) {
    size_t n = strlen(name), ns = strlen(suffix);
    return n == 64 + ns && is_hex64(name) && strcmp(name + 64, suffix) == 0;
}

static bool has_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                       */
/* ------------------------------------------------------------------------ */

/* Each part goes in as TAG, present byte, 8-byte length, bytes: no two
 * different part lists hash the same input, whatever bytes the parts hold. */
static void key_part(kf_sha256 *h, char tag, const char *s, size_t len) {
    uint8_t head[10] = {(uint8_t)tag, s != NULL};
    put_u64(head + 2, s ? (uint64_t)len : 0);
    kf_sha256_update(h, head, sizeof head);
    if (s)
        kf_sha256_update(h, s, len);
}

void kf_cache_key_build(const kf_cache_key_parts *parts, kf_cache_key *out) {
    static const char domain[] = "kfuse cache key v1";
    kf_sha256 h;
    kf_sha256_init(&h);
    kf_sha256_update(&h, domain, sizeof domain);
    key_part(&h, 'S', parts->source, parts->source_len);
    key_part(&h, 'O', parts->options, parts->options ? strlen(parts->options) : 0);
    key_part(&h, 'A', parts->arch, parts->arch ? strlen(parts->arch) : 0);
    key_part(&h, 'C', parts->compiler, parts->compiler ? strlen(parts->compiler) : 0);
    uint8_t v[4];
    put_u32(v, parts->codegen_version);
    key_part(&h, 'V', (const char *)v, sizeof v);
    kf_sha256_final(&h, out->bytes);
}

char *kf_cache_key_hex(const kf_cache_key *key, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < KF_CACHE_KEY_BYTES; i++) {
        out[2 * i] = digits[key->bytes[i] >> 4];
        out[2 * i + 1] = digits[key->bytes[i] & 15];
    }
    out[2 * KF_CACHE_KEY_BYTES] = 0;
    return out;
}

bool kf_cache_key_parse(const char *hex, kf_cache_key *out) {
    if (!hex || strlen(hex) != 64 || !is_hex64(hex))
        return false;
    for (int i = 0; i < KF_CACHE_KEY_BYTES; i++) {
        int hi = hex[2 * i] <= '9' ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10;
        int lo = hex[2 * i + 1] <= '9' ? hex[2 * i + 1] - '0' : hex[2 * i + 1] - 'a' + 10;
        out->bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                    */
/* ------------------------------------------------------------------------ */

static char *mem_strdup(const kf_mem *m, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = kf_mem_alloc(m, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

kf_status kf_cache_default_dir(const kf_mem *mem, char **out) {
    *out = NULL;
    /* The platform's cache location; kfuse's own KF_CACHE_DIR is the CLI's
     * to map onto kf_options.cache_dir (the library reads no KF_ variable). */
    const char *env = NULL, *base = NULL, *tail = "";
    if ((env = getenv("XDG_CACHE_HOME")) && *env) {
        base = env;
        tail = "/kfuse";
    } else if ((env = getenv("HOME")) && *env) {
        base = env;
        tail = "/.cache/kfuse";
    } else {
        return KF_ERR_NOT_FOUND;
    }
    size_t n = strlen(base) + strlen(tail) + 1;
    char *p = kf_mem_alloc(mem, n);
    if (!p)
        return KF_ERR_OUT_OF_MEMORY;
    snprintf(p, n, "%s%s", base, tail);
    *out = p;
    return KF_OK;
}

/* mkdir -p with mode 0700 for every directory it creates. `path` is modified
 * in place and restored. */
static int mkdir_p(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        int r = mkdir(path, 0700);
        int e = errno;
        *p = '/';
        if (r != 0 && e != EEXIST)
            return -1;
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

kf_status kf_cache_open(const kf_mem *mem, const kf_cache_options *options, kf_cache **out,
                        kf_cache_msg *msg) {
    kf_cache_msg local;
    if (!msg)
        msg = &local;
    msg_reset(msg);
    if (!out || !mem || !options)
        return fail(msg, KF_ERR_INVALID_ARGUMENT, "kf_cache_open: NULL argument");
    *out = NULL;
    kf_cache *c = kf_mem_alloc(mem, sizeof *c);
    if (!c)
        return fail(msg, KF_ERR_OUT_OF_MEMORY, "out of memory opening the kernel cache");
    memset(c, 0, sizeof *c);
    c->mem = *mem;
    c->dirfd = -1;
    c->flags = options->flags;
    c->max_bytes = options->max_bytes;
    c->lock_wait_ms = options->lock_wait_ms ? options->lock_wait_ms : 120000;
    c->stale_lock_ms = options->stale_lock_ms ? options->stale_lock_ms : 600000;
    kf_status st;
    if (options->dir) {
        c->dir = mem_strdup(mem, options->dir);
        st = c->dir ? KF_OK : KF_ERR_OUT_OF_MEMORY;
    } else {
        st = kf_cache_default_dir(mem, &c->dir);
        if (st == KF_ERR_NOT_FOUND) {
            fail(msg, st, "no cache directory: set KF_CACHE_DIR or HOME, or pass one");
            goto out;
        }
    }
    if (st != KF_OK) {
        fail(msg, st, "out of memory opening the kernel cache");
        goto out;
    }
    if (!c->dir[0]) {
        st = fail(msg, KF_ERR_INVALID_ARGUMENT, "the cache directory name is empty");
        goto out;
    }
    if (!(c->flags & KF_CACHE_READ_ONLY) && mkdir_p(c->dir) != 0) {
        st =
            fail(msg, KF_ERR_IO, "cannot create cache directory '%s': %s", c->dir, strerror(errno));
        goto out;
    }
    c->dirfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->dirfd < 0) {
        int e = errno;
        if (e == ENOENT)
            st = fail(msg, KF_ERR_NOT_FOUND, "cache directory '%s' does not exist", c->dir);
        else if (e == ENOTDIR)
            st = fail(msg, KF_ERR_INVALID_ARGUMENT, "cache path '%s' is not a directory", c->dir);
        else
            st = fail(msg, KF_ERR_IO, "cannot open cache directory '%s': %s", c->dir, strerror(e));
        goto out;
    }
    struct stat sb;
    if (fstat(c->dirfd, &sb) != 0) {
        st = fail(msg, KF_ERR_IO, "cannot stat cache directory '%s': %s", c->dir, strerror(errno));
        goto out;
    }
    if (sb.st_uid != geteuid()) {
        st = fail(msg, KF_ERR_INVALID_ARGUMENT,
                  "cache directory '%s' is owned by uid %u, not by you (uid %u): whoever owns "
                  "it could replace the kernels this process runs; use a directory you own",
                  c->dir, (unsigned)sb.st_uid, (unsigned)geteuid());
        goto out;
    }
    if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
        st = fail(msg, KF_ERR_INVALID_ARGUMENT,
                  "cache directory '%s' is writable by group or others (mode %04o): other "
                  "users could replace the kernels this process runs; run `chmod go-w %s` "
                  "(or `chmod 700 %s`)",
                  c->dir, (unsigned)(sb.st_mode & 07777), c->dir, c->dir);
        goto out;
    }
    *out = c;
    return KF_OK;
out:
    kf_cache_close(c);
    return st;
}

void kf_cache_close(kf_cache *cache) {
    if (!cache)
        return;
    if (cache->dirfd >= 0)
        close(cache->dirfd);
    if (cache->dir)
        kf_mem_free(&cache->mem, cache->dir, strlen(cache->dir) + 1);
    kf_mem_free(&cache->mem, cache, sizeof *cache);
}

const char *kf_cache_dir(const kf_cache *cache) { return cache ? cache->dir : NULL; }

void kf_cache_blob_free(const kf_cache *cache, void *data, size_t len) {
    if (cache && data)
        kf_mem_free(&cache->mem, data, len);
}

/* ------------------------------------------------------------------------ */
/* Entries                                                                    */
/* ------------------------------------------------------------------------ */

/* What a file that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode) {
    if (S_ISLNK(mode))
        return "a symbolic link";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "not a regular file";
}

/*
 * Header, little-endian:
 *   0  magic "KFCACHE\0"     8  format version (u32)   12  header bytes (u32, 64)
 *  16  key (32 bytes)       48  payload length (u64)
 *  56  payload CRC32C (u32) 60  CRC32C of bytes 0..59 (u32)
 */
static void header_encode(uint8_t h[HEADER_BYTES], const kf_cache_key *key, const void *data,
                          size_t len) {
    memcpy(h, entry_magic, 8);
    put_u32(h + 8, FORMAT_VERSION);
    put_u32(h + 12, HEADER_BYTES);
    memcpy(h + 16, key->bytes, KF_CACHE_KEY_BYTES);
    put_u64(h + 48, (uint64_t)len);
    put_u32(h + 56, kf_crc32c(0, data, len));
    put_u32(h + 60, kf_crc32c(0, h, 60));
}

typedef enum read_result { READ_OK, READ_CORRUPT, READ_OOM, READ_IO } read_result;

/* Checks the entry open at `fd` against `key`. With `data` non-NULL, reads and
 * checks the payload too and returns it (allocated with `mem`). On
 * READ_CORRUPT `problem` says what is wrong. */
static read_result entry_read(const kf_mem *mem, int fd, const kf_cache_key *key, void **data,
                              size_t *len, uint64_t *payload_bytes, char *problem,
                              size_t problem_size) {
    struct stat sb;
    uint8_t h[HEADER_BYTES];
    *payload_bytes = 0;
    if (fstat(fd, &sb) != 0) {
        snprintf(problem, problem_size, "cannot stat: %s", strerror(errno));
        return READ_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(problem, problem_size, "%s, not a regular file", file_kind(sb.st_mode));
        return READ_CORRUPT;
    }
    if (sb.st_uid != geteuid()) {
        snprintf(problem, problem_size, "owned by uid %u, not by this user (uid %u)",
                 (unsigned)sb.st_uid, (unsigned)geteuid());
        return READ_CORRUPT;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < HEADER_BYTES) {
        snprintf(problem, problem_size, "truncated: %llu bytes, shorter than the %d-byte header",
                 (unsigned long long)size, HEADER_BYTES);
        return READ_CORRUPT;
    }
    if (!pread_all(fd, h, HEADER_BYTES, 0)) {
        snprintf(problem, problem_size, "cannot read the header: %s", strerror(errno));
        return READ_IO;
    }
    if (memcmp(h, entry_magic, 8) != 0) {
        snprintf(problem, problem_size, "not a kfuse cache entry (bad magic)");
        return READ_CORRUPT;
    }
    if (get_u32(h + 60) != kf_crc32c(0, h, 60)) {
        snprintf(problem, problem_size, "header checksum mismatch");
        return READ_CORRUPT;
    }
    if (get_u32(h + 8) != FORMAT_VERSION || get_u32(h + 12) != HEADER_BYTES) {
        snprintf(problem, problem_size, "entry format version %u; this kfuse reads version %u",
                 get_u32(h + 8), FORMAT_VERSION);
        return READ_CORRUPT;
    }
    if (memcmp(h + 16, key->bytes, KF_CACHE_KEY_BYTES) != 0) {
        snprintf(problem, problem_size, "the key in the header differs from the file name");
        return READ_CORRUPT;
    }
    uint64_t plen = get_u64(h + 48);
    *payload_bytes = plen;
    if (plen != size - HEADER_BYTES) {
        snprintf(problem, problem_size,
                 "%s: the header promises %llu payload bytes, the file holds %llu",
                 plen > size - HEADER_BYTES ? "truncated" : "trailing bytes",
                 (unsigned long long)plen, (unsigned long long)(size - HEADER_BYTES));
        return READ_CORRUPT;
    }
    if (!data)
        return READ_OK;
    if (plen > SIZE_MAX - 1)
        return READ_OOM;
    void *buf = kf_mem_alloc(mem, (size_t)plen);
    if (!buf)
        return READ_OOM;
    if (!pread_all(fd, buf, (size_t)plen, HEADER_BYTES)) {
        kf_mem_free(mem, buf, (size_t)plen);
        snprintf(problem, problem_size, "cannot read the payload (changed while reading?)");
        return READ_CORRUPT;
    }
    if (kf_crc32c(0, buf, (size_t)plen) != get_u32(h + 56)) {
        kf_mem_free(mem, buf, (size_t)plen);
        snprintf(problem, problem_size, "payload checksum mismatch");
        return READ_CORRUPT;
    }
    *data = buf;
    *len = (size_t)plen;
    return READ_OK;
}

/* Removes `name` if it is still the file open at `fd` (a writer may have
 * renamed a good entry over it since we opened it). A directory goes only
 * when empty: the cache never removes what someone put inside one. */
static void remove_if_same(const kf_cache *c, const char *name, int fd) {
    struct stat a, b;
    if (fstat(fd, &a) == 0 && fstatat(c->dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        (void)unlinkat(c->dirfd, name, S_ISDIR(b.st_mode) ? AT_REMOVEDIR : 0);
}

/* Opens a cache file without following a link and without blocking (a FIFO
 * opens at once and then fails the regular-file check). On failure *problem
 * says what is there instead; returns -1 with errno ENOENT when nothing is. */
static int open_no_follow(const kf_cache *c, const char *name, char *problem, size_t size) {
    int fd = openat(c->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd >= 0 || errno == ENOENT)
        return fd;
    int e = errno;
    struct stat sb;
    if (fstatat(c->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode))
        snprintf(problem, size, "%s, not a regular file", file_kind(sb.st_mode));
    else
        snprintf(problem, size, "cannot be opened: %s", strerror(e));
    errno = e == ENOENT ? EIO : e;
    return -1;
}

/* Removes what squats on `name` when it cannot even be opened (a symbolic
 * link: the link itself, never its target). */
static void remove_unopenable(const kf_cache *c, const char *name) {
    struct stat sb;
    if (fstatat(c->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
        (void)unlinkat(c->dirfd, name, S_ISDIR(sb.st_mode) ? AT_REMOVEDIR : 0);
}

kf_status kf_cache_get(kf_cache *cache, const kf_cache_key *key, void **data, size_t *len,
                       kf_cache_msg *msg) {
    kf_cache_msg local;
    if (!msg)
        msg = &local;
    msg_reset(msg);
    if (!cache || !key || !data || !len)
        return fail(msg, KF_ERR_INVALID_ARGUMENT, "kf_cache_get: NULL argument");
    *data = NULL;
    *len = 0;
    char hex[KF_CACHE_KEY_HEX], name[NAME_MAX_KF];
    kf_cache_key_hex(key, hex);
    snprintf(name, sizeof name, "%s%s", hex, ENTRY_SUFFIX);
    char problem[128];
    int fd = open_no_follow(cache, name, problem, sizeof problem);
    if (fd < 0) {
        if (errno == ENOENT)
            return fail(msg, KF_ERR_NOT_FOUND, "no cache entry %s in %s", hex, cache->dir);
        if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
            return fail(msg, KF_ERR_IO, "cannot open cache entry %s/%s: %s", cache->dir, name,
                        problem);
        /* A link, a permission trap, anything that is not our file: a corrupt
         * entry, reported, removed (the link, never its target) and missed. */
        bool ro = cache->flags & KF_CACHE_READ_ONLY;
        if (!ro)
            remove_unopenable(cache, name);
        note(msg, KF_CACHE_EV_CORRUPT, "corrupt kernel cache entry %s/%s %s: %s", cache->dir, name,
             ro ? "ignored (read-only cache)" : "removed", problem);
        return fail(msg, KF_ERR_NOT_FOUND, "no valid cache entry %s in %s", hex, cache->dir);
    }
    uint64_t plen;
    read_result r = entry_read(&cache->mem, fd, key, data, len, &plen, problem, sizeof problem);
    kf_status st = KF_OK;
    switch (r) {
    case READ_OK:
        if (!(cache->flags & KF_CACHE_READ_ONLY))
            touch_fd(fd);
        break;
    case READ_CORRUPT:
        if (!(cache->flags & KF_CACHE_READ_ONLY))
            remove_if_same(cache, name, fd);
        note(msg, KF_CACHE_EV_CORRUPT, "corrupt kernel cache entry %s/%s %s: %s", cache->dir, name,
             (cache->flags & KF_CACHE_READ_ONLY) ? "ignored (read-only cache)" : "removed",
             problem);
        st = fail(msg, KF_ERR_NOT_FOUND, "no valid cache entry %s in %s", hex, cache->dir);
        break;
    case READ_OOM:
        st = fail(msg, KF_ERR_OUT_OF_MEMORY, "out of memory reading cache entry %s (%llu bytes)",
                  hex, (unsigned long long)plen);
        break;
    case READ_IO:
        st = fail(msg, KF_ERR_IO, "cache entry %s/%s: %s", cache->dir, name, problem);
        break;
    }
    close(fd);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Scanning and eviction                                                      */
/* ------------------------------------------------------------------------ */

typedef struct scan_item {
    char name[NAME_MAX_KF];
    uint64_t size;
    int64_t mtime_ns;
    mode_t mode; /* from lstat: anything but a regular file is a squatter */
} scan_item;

typedef struct scan_list {
    scan_item *items;
    uint32_t n, cap;
} scan_list;

static void scan_release(const kf_cache *c, scan_list *l) {
    if (l->items)
        kf_mem_free(&c->mem, l->items, (size_t)l->cap * sizeof *l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

/* A new open file description of the directory for readdir: a dup() would
 * share its offset with every other thread scanning the same handle. */
static int open_dir_again(const kf_cache *c) {
    return openat(c->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Every entry file (KEY.kfc) with its size and mtime. */
static kf_status scan_entries(kf_cache *c, scan_list *l, kf_cache_msg *msg) {
    memset(l, 0, sizeof *l);
    int fd = open_dir_again(c);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return fail(msg, KF_ERR_IO, "cannot read cache directory '%s': %s", c->dir,
                    strerror(errno));
    }
    kf_status st = KF_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_key_file(e->d_name, ENTRY_SUFFIX))
            continue;
        struct stat sb;
        if (fstatat(c->dirfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* removed meanwhile */
        if (!kf_mem_grow(&c->mem, (void **)&l->items, &l->cap, l->n + 1, sizeof *l->items)) {
            st = fail(msg, KF_ERR_OUT_OF_MEMORY, "out of memory listing the kernel cache");
            break;
        }
        scan_item *it = &l->items[l->n++];
        snprintf(it->name, sizeof it->name, "%s", e->d_name);
        it->size = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
        it->mtime_ns = mtime_ns(&sb);
        it->mode = sb.st_mode;
    }
    closedir(d);
    if (st != KF_OK)
        scan_release(c, l);
    return st;
}

static int item_by_age(const void *a, const void *b) {
    const scan_item *x = a, *y = b;
    if (x->mtime_ns != y->mtime_ns)
        return x->mtime_ns < y->mtime_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Evicts least recently used entries until the total fits the cap, sparing
 * `keep` (the entry just written). */
static kf_status evict(kf_cache *c, const char *keep, kf_cache_msg *msg) {
    if (!c->max_bytes)
        return KF_OK;
    scan_list l;
    kf_status st = scan_entries(c, &l, msg);
    if (st != KF_OK)
        return st;
    uint64_t total = 0, freed = 0;
    for (uint32_t i = 0; i < l.n; i++)
        total += l.items[i].size;
    size_t removed = 0;
    if (total > c->max_bytes) {
        qsort(l.items, l.n, sizeof *l.items, item_by_age);
        for (uint32_t i = 0; i < l.n && total > c->max_bytes; i++) {
            if (strcmp(l.items[i].name, keep) == 0 || !S_ISREG(l.items[i].mode))
                continue;
            if (unlinkat(c->dirfd, l.items[i].name, 0) == 0 || errno == ENOENT) {
                total -= l.items[i].size;
                freed += l.items[i].size;
                removed++;
            }
        }
    }
    scan_release(c, &l);
    if (removed)
        note(msg, KF_CACHE_EV_EVICTED,
             "evicted %zu least recently used entries (%llu bytes) to fit the %llu-byte cap",
             removed, (unsigned long long)freed, (unsigned long long)c->max_bytes);
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                    */
/* ------------------------------------------------------------------------ */

kf_status kf_cache_put(kf_cache *cache, const kf_cache_key *key, const void *data, size_t len,
                       kf_cache_msg *msg) {
    kf_cache_msg local;
    if (!msg)
        msg = &local;
    msg_reset(msg);
    if (!cache || !key || (!data && len))
        return fail(msg, KF_ERR_INVALID_ARGUMENT, "kf_cache_put: NULL argument");
    if (cache->flags & KF_CACHE_READ_ONLY)
        return fail(msg, KF_ERR_UNSUPPORTED, "the kernel cache %s is read-only", cache->dir);
    char hex[KF_CACHE_KEY_HEX], name[NAME_MAX_KF], tmp[NAME_MAX_KF];
    kf_cache_key_hex(key, hex);
    snprintf(name, sizeof name, "%s%s", hex, ENTRY_SUFFIX);
    uint8_t h[HEADER_BYTES];
    header_encode(h, key, data ? data : "", len);

    int fd = -1;
    for (int attempt = 0; fd < 0 && attempt < 16; attempt++) {
        snprintf(tmp, sizeof tmp, TMP_PREFIX "%s-%ld-%lld", hex, (long)getpid(),
                 (long long)now_ns());
        fd = openat(cache->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0)
        return store_failed(msg, fail(msg, KF_ERR_IO,
                                      "cannot create a temporary file in cache directory %s: %s",
                                      cache->dir, strerror(errno)));
    const char *step = NULL;
    if (!write_all(fd, h, sizeof h) || (len && !write_all(fd, data, len)))
        step = "write";
    else if (fsync(fd) != 0)
        step = "fsync";
    if (!step)
        touch_fd(fd);
    int e = errno;
    if (close(fd) != 0 && !step) {
        step = "close";
        e = errno;
    }
    if (!step && renameat(cache->dirfd, tmp, cache->dirfd, name) != 0) {
        step = "rename";
        e = errno;
    }
    if (step) {
        (void)unlinkat(cache->dirfd, tmp, 0); /* no partial file is left behind */
        return store_failed(msg, fail(msg, KF_ERR_IO, "cannot store cache entry %s/%s (%s): %s",
                                      cache->dir, name, step, strerror(e)));
    }
    if (fsync(cache->dirfd) != 0) {
        /* The entry is whole (fsync'ed, renamed) but its name may not survive
         * a crash: remove it rather than count on it. */
        e = errno;
        (void)unlinkat(cache->dirfd, name, 0);
        return store_failed(msg, fail(msg, KF_ERR_IO, "fsync of cache directory %s failed: %s",
                                      cache->dir, strerror(e)));
    }
    msg->store = KF_CACHE_STORE_DONE;
    return evict(cache, name, msg);
}

/* ------------------------------------------------------------------------ */
/* Locks: compute a key once across processes                                 */
/* ------------------------------------------------------------------------ */

typedef enum lock_result { LOCK_ACQUIRED, LOCK_BUSY, LOCK_RETRY, LOCK_ERROR } lock_result;

typedef struct lock_held {
    char name[NAME_MAX_KF];
    dev_t dev;
    ino_t ino;
} lock_held;

/* Lock content: "PID HOST NANOSECONDS\n". */
static lock_result lock_try(kf_cache *c, const char *hex, lock_held *held, kf_cache_msg *msg) {
    char host[128] = "";
    (void)gethostname(host, sizeof host - 1);
    snprintf(held->name, sizeof held->name, "%s%s", hex, LOCK_SUFFIX);
    int fd =
        openat(c->dirfd, held->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        char line[256];
        int n =
            snprintf(line, sizeof line, "%ld %s %lld\n", (long)getpid(), host, (long long)now_ns());
        struct stat sb;
        bool ok = write_all(fd, line, (size_t)n) && fstat(fd, &sb) == 0;
        touch_fd(fd);
        close(fd);
        if (!ok) {
            (void)unlinkat(c->dirfd, held->name, 0);
            fail(msg, KF_ERR_IO, "cannot write lock file %s/%s", c->dir, held->name);
            return LOCK_ERROR;
        }
        held->dev = sb.st_dev;
        held->ino = sb.st_ino;
        return LOCK_ACQUIRED;
    }
    if (errno != EEXIST) {
        fail(msg, KF_ERR_IO, "cannot create lock file %s/%s: %s", c->dir, held->name,
             strerror(errno));
        return LOCK_ERROR;
    }

    /* Someone holds it: judge whether it is stale. Only a regular file of
     * this user is a lock; a link (to anything), a FIFO, a directory or
     * another user's file is an impostor that no process will ever release:
     * it is removed at once (the link itself, never its target) instead of
     * being waited on. */
    char problem[128];
    fd = open_no_follow(c, held->name, problem, sizeof problem);
    if (fd < 0 && errno == ENOENT)
        return LOCK_RETRY;
    struct stat sb;
    bool have = fd >= 0 && fstat(fd, &sb) == 0;
    if (have && !S_ISREG(sb.st_mode))
        snprintf(problem, sizeof problem, "%s, not a regular file", file_kind(sb.st_mode));
    else if (have && sb.st_uid != geteuid())
        snprintf(problem, sizeof problem, "owned by uid %u, not by this user", (unsigned)sb.st_uid);
    if (fd < 0 || (have && (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid()))) {
        if (fd >= 0) {
            remove_if_same(c, held->name, fd);
            close(fd);
        } else {
            remove_unopenable(c, held->name);
        }
        note(msg, KF_CACHE_EV_CORRUPT, "removed lock %s/%s: %s", c->dir, held->name, problem);
        return LOCK_RETRY;
    }
    char line[256] = "";
    ssize_t n = have ? pread(fd, line, sizeof line - 1, 0) : -1;
    close(fd);
    if (!have)
        return LOCK_BUSY;
    line[n > 0 ? n : 0] = 0;
    long pid = 0;
    char lhost[128] = "";
    long long started = 0;
    bool parsed = sscanf(line, "%ld %127s %lld", &pid, lhost, &started) == 3 && pid > 0;
    int64_t age_ms = (now_ns() - mtime_ns(&sb)) / 1000000;
    const char *why = NULL;
    char whybuf[160];
    if (parsed && strcmp(lhost, host) == 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
        snprintf(whybuf, sizeof whybuf, "its process %ld is gone", pid);
        why = whybuf;
    } else if (age_ms > (int64_t)c->stale_lock_ms) {
        snprintf(whybuf, sizeof whybuf, "it is %lld ms old (stale after %u ms)", (long long)age_ms,
                 c->stale_lock_ms);
        why = whybuf;
    } else if (!parsed && age_ms > 5000) {
        snprintf(whybuf, sizeof whybuf, "it is unreadable and %lld ms old", (long long)age_ms);
        why = whybuf;
    }
    if (!why)
        return LOCK_BUSY;

    /* Break it by renaming it aside, then check that what we moved is the
     * lock we judged (another waiter may have broken it and taken a fresh
     * one meanwhile); if not, put the fresh one back without clobbering. */
    char aside[NAME_MAX_KF];
    snprintf(aside, sizeof aside, BROKEN_PREFIX "%s-%ld-%lld", hex, (long)getpid(),
             (long long)now_ns());
    if (renameat(c->dirfd, held->name, c->dirfd, aside) != 0)
        return LOCK_RETRY;
    struct stat moved;
    bool same = fstatat(c->dirfd, aside, &moved, AT_SYMLINK_NOFOLLOW) == 0 &&
                moved.st_dev == sb.st_dev && moved.st_ino == sb.st_ino;
    /* Someone else's lock was moved aside: put it back. If that fails its
     * holder finds its lock gone and retries, as after any stale break. */
    if (!same && linkat(c->dirfd, aside, c->dirfd, held->name, 0) != 0)
        note(msg, KF_CACHE_EV_STALE_LOCK, "could not restore lock %s/%s", c->dir, held->name);
    (void)unlinkat(c->dirfd, aside, 0);
    if (!same)
        return LOCK_BUSY;
    note(msg, KF_CACHE_EV_STALE_LOCK, "broke stale lock %s/%s: %s", c->dir, held->name, why);
    return LOCK_RETRY;
}

/* Removes the lock if it is still ours. */
static void lock_release(kf_cache *c, const lock_held *held) {
    struct stat sb;
    if (fstatat(c->dirfd, held->name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && sb.st_dev == held->dev &&
        sb.st_ino == held->ino)
        (void)unlinkat(c->dirfd, held->name, 0);
}

/* Runs `compute` and stores its result (unless read-only). */
static kf_status compute_and_store(kf_cache *c, const kf_cache_key *key,
                                   kf_cache_compute_fn compute, void *user, void **data,
                                   size_t *len, bool *computed, kf_cache_msg *msg) {
    char err[KF_MSG_MAX] = "";
    void *buf = NULL;
    size_t n = 0;
    kf_status st = compute(user, &c->mem, &buf, &n, err);
    *computed = true;
    if (st != KF_OK) {
        if (buf)
            kf_mem_free(&c->mem, buf, n);
        return fail(msg, st, "%s", err[0] ? err : kf_status_str(st));
    }
    if (!(c->flags & KF_CACHE_READ_ONLY)) {
        /* put resets msg: keep the notes of this call. */
        kf_cache_msg put_msg;
        st = kf_cache_put(c, key, buf, n, &put_msg);
        msg->events |= put_msg.events;
        msg->store =
            put_msg.store == KF_CACHE_STORE_DONE ? KF_CACHE_STORE_DONE : KF_CACHE_STORE_FAILED;
        snprintf(msg->store_error, sizeof msg->store_error, "%s",
                 msg->store == KF_CACHE_STORE_FAILED ? put_msg.error : "");
        if (put_msg.note[0])
            snprintf(msg->note, sizeof msg->note, "%s", put_msg.note);
        /* The payload is good even when storing it failed (a full disk, a
         * directory gone read-only): hand it back and say so. */
        if (st != KF_OK && msg->store == KF_CACHE_STORE_FAILED)
            note(msg, KF_CACHE_EV_STORE_FAILED, "computed, but not cached: %s", put_msg.error);
        else if (st != KF_OK)
            note(msg, KF_CACHE_EV_STORE_FAILED, "cached, but: %s", put_msg.error);
    }
    *data = buf;
    *len = n;
    msg->error[0] = 0; /* the miss that led here is not an error */
    return KF_OK;
}

/* kf_cache_get without resetting msg's events (they accumulate over a call). */
static kf_status get_keep(kf_cache *c, const kf_cache_key *key, void **data, size_t *len,
                          kf_cache_msg *msg) {
    kf_cache_msg m;
    kf_status st = kf_cache_get(c, key, data, len, &m);
    msg->events |= m.events;
    if (m.note[0])
        snprintf(msg->note, sizeof msg->note, "%s", m.note);
    if (st != KF_OK)
        snprintf(msg->error, sizeof msg->error, "%s", m.error);
    return st;
}

kf_status kf_cache_get_or_compute(kf_cache *cache, const kf_cache_key *key,
                                  kf_cache_compute_fn compute, void *user, void **data, size_t *len,
                                  bool *computed, kf_cache_msg *msg) {
    kf_cache_msg local;
    if (!msg)
        msg = &local;
    msg_reset(msg);
    bool dummy;
    if (!computed)
        computed = &dummy;
    *computed = false;
    if (!cache || !key || !compute || !data || !len)
        return fail(msg, KF_ERR_INVALID_ARGUMENT, "kf_cache_get_or_compute: NULL argument");
    kf_status st = get_keep(cache, key, data, len, msg);
    if (st != KF_ERR_NOT_FOUND)
        return st;
    char hex[KF_CACHE_KEY_HEX];
    kf_cache_key_hex(key, hex);
    if (cache->flags & KF_CACHE_FAIL_ON_MISS)
        return fail(msg, KF_ERR_NOT_FOUND,
                    "kernel cache miss for key %s in %s, and fail-on-miss is set: fill the "
                    "cache first (kfuse aot ... -o %s) or clear the fail-on-miss flag",
                    hex, cache->dir, cache->dir);
    if (cache->flags & KF_CACHE_READ_ONLY)
        return compute_and_store(cache, key, compute, user, data, len, computed, msg);

    int64_t deadline = now_ns() + (int64_t)cache->lock_wait_ms * 1000000;
    uint32_t backoff_ms = 1, retries = 0;
    for (;;) {
        lock_held held;
        lock_result lr = lock_try(cache, hex, &held, msg);
        if (lr == LOCK_ERROR) {
            /* No lock to be had (a full or read-only disk): the compile
             * still runs; only the once-across-processes promise is lost. */
            char why[KF_MSG_MAX];
            snprintf(why, sizeof why, "%s", msg->error);
            note(msg, KF_CACHE_EV_STORE_FAILED, "computing without a lock: %s", why);
            return compute_and_store(cache, key, compute, user, data, len, computed, msg);
        }
        if (lr == LOCK_ACQUIRED) {
            /* The holder before us may have finished between our get and now. */
            st = get_keep(cache, key, data, len, msg);
            if (st == KF_ERR_NOT_FOUND)
                st = compute_and_store(cache, key, compute, user, data, len, computed, msg);
            lock_release(cache, &held);
            return st;
        }
        /* Retry at once after breaking a stale lock or losing a race, but
         * a bounded number of times: a lock that keeps reading stale and
         * cannot be moved must not spin; it is waited on like a live one. */
        if (lr == LOCK_RETRY && retries++ < 16)
            continue;
        msg->events |= KF_CACHE_EV_WAITED;
        st = get_keep(cache, key, data, len, msg);
        if (st != KF_ERR_NOT_FOUND)
            return st;
        if (now_ns() > deadline) {
            note(msg, KF_CACHE_EV_LOCK_TIMEOUT,
                 "waited %u ms for another process to compute cache entry %s in %s; "
                 "computing it here as well",
                 cache->lock_wait_ms, hex, cache->dir);
            return compute_and_store(cache, key, compute, user, data, len, computed, msg);
        }
        sleep_ms(backoff_ms);
        backoff_ms = backoff_ms < 64 ? backoff_ms * 2 : 100;
    }
}

/* ------------------------------------------------------------------------ */
/* Listing, verifying, clearing                                               */
/* ------------------------------------------------------------------------ */

static kf_status walk(kf_cache *c, bool full, kf_cache_entry_fn fn, void *user, size_t *n_corrupt,
                      kf_cache_msg *msg) {
    scan_list l;
    kf_status st = scan_entries(c, &l, msg);
    if (st != KF_OK)
        return st;
    if (l.n > 1)
        qsort(l.items, l.n, sizeof *l.items, item_by_age);
    size_t bad = 0;
    for (uint32_t i = 0; i < l.n && st == KF_OK; i++) {
        kf_cache_entry_info info;
        memset(&info, 0, sizeof info);
        memcpy(info.key_hex, l.items[i].name, 64);
        info.file_bytes = l.items[i].size;
        info.mtime_ns = l.items[i].mtime_ns;
        kf_cache_key key;
        kf_cache_key_parse(info.key_hex, &key);
        int fd = open_no_follow(c, l.items[i].name, info.problem, sizeof info.problem);
        if (fd < 0 && errno == ENOENT)
            continue; /* evicted or cleared meanwhile */
        if (fd < 0) {
            /* A symbolic link (or anything else that does not open as ours). */
            bad++;
            info.state = KF_CACHE_ENTRY_CORRUPT;
            bool ro = c->flags & KF_CACHE_READ_ONLY;
            if (!ro)
                remove_unopenable(c, l.items[i].name);
            note(msg, KF_CACHE_EV_CORRUPT, "corrupt kernel cache entry %s/%s %s: %s", c->dir,
                 l.items[i].name, ro ? "kept (read-only cache)" : "removed", info.problem);
            if (fn)
                fn(user, &info);
            continue;
        }
        void *data = NULL;
        size_t len = 0;
        read_result r = entry_read(&c->mem, fd, &key, full ? &data : NULL, &len,
                                   &info.payload_bytes, info.problem, sizeof info.problem);
        if (data)
            kf_mem_free(&c->mem, data, len);
        if (r == READ_OOM) {
            st = fail(msg, KF_ERR_OUT_OF_MEMORY, "out of memory verifying cache entry %s",
                      info.key_hex);
        } else if (r == READ_IO) {
            st = fail(msg, KF_ERR_IO, "cache entry %s/%s: %s", c->dir, l.items[i].name,
                      info.problem);
        } else {
            info.state = r == READ_OK ? KF_CACHE_ENTRY_OK : KF_CACHE_ENTRY_CORRUPT;
            if (r == READ_CORRUPT) {
                bad++;
                if (!(c->flags & KF_CACHE_READ_ONLY))
                    remove_if_same(c, l.items[i].name, fd);
                note(msg, KF_CACHE_EV_CORRUPT, "corrupt kernel cache entry %s/%s %s: %s", c->dir,
                     l.items[i].name,
                     (c->flags & KF_CACHE_READ_ONLY) ? "kept (read-only cache)" : "removed",
                     info.problem);
            }
            if (fn)
                fn(user, &info);
        }
        close(fd);
    }
    scan_release(c, &l);
    if (n_corrupt)
        *n_corrupt = bad;
    return st;
}

kf_status kf_cache_list(kf_cache *cache, kf_cache_entry_fn fn, void *user, kf_cache_msg *msg) {
    kf_cache_msg local;
    if (!msg)
        msg = &local;
    msg_reset(msg);
    if (!cache || !fn)
        return fail(msg, KF_ERR_INVALID_ARGUMENT, "kf_cache_list: NULL argument");
    return walk(cache, false, fn, user, NULL, msg);
}

kf_status kf_cache_verify(kf_cache *cache, kf_cache_entry_fn fn, void *user, size_t *n_corrupt,
                          kf_cache_msg *msg) {
    kf_cache_msg local;
    if (!msg)
        msg = &local;
    msg_reset(msg);
    if (!cache)
        return fail(msg, KF_ERR_INVALID_ARGUMENT, "kf_cache_verify: NULL cache");
    return walk(cache, true, fn, user, n_corrupt, msg);
}

kf_status kf_cache_clear(kf_cache *cache, size_t *n_removed, kf_cache_msg *msg) {
    kf_cache_msg local;
    if (!msg)
        msg = &local;
    msg_reset(msg);
    if (!cache)
        return fail(msg, KF_ERR_INVALID_ARGUMENT, "kf_cache_clear: NULL cache");
    if (n_removed)
        *n_removed = 0;
    if (cache->flags & KF_CACHE_READ_ONLY)
        return fail(msg, KF_ERR_UNSUPPORTED, "the kernel cache %s is read-only", cache->dir);
    int fd = open_dir_again(cache);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return fail(msg, KF_ERR_IO, "cannot read cache directory '%s': %s", cache->dir,
                    strerror(errno));
    }
    size_t removed = 0;
    int64_t now = now_ns();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        bool entry = is_key_file(n, ENTRY_SUFFIX);
        /* Temporaries and locks only when abandoned: a writer may be busy. */
        bool leftover = has_prefix(n, TMP_PREFIX) || has_prefix(n, BROKEN_PREFIX) ||
                        is_key_file(n, LOCK_SUFFIX);
        if (!entry && !leftover)
            continue; /* not the cache's: leave it */
        if (leftover) {
            struct stat sb;
            if (fstatat(cache->dirfd, n, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
                (now - mtime_ns(&sb)) / 1000000 <= (int64_t)cache->stale_lock_ms)
                continue;
        }
        if (unlinkat(cache->dirfd, n, 0) == 0 && entry)
            removed++;
    }
    closedir(d);
    if (n_removed)
        *n_removed = removed;
    return KF_OK;
}
