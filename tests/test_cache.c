/*
 * test_cache.c -- the on-disk kernel cache (runtime/cache.h): keys, hits and
 * misses, corrupt and truncated entries, processes racing on one key, stale
 * locks, directory permissions, LRU eviction, read-only and fail-on-miss,
 * list/verify/clear, and allocation failure. Every test works in its own
 * fresh directory under $TMPDIR.
 */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frontend/cmd_cache.h"
#include "kf_test.h"
#include "runtime/cache.h"
#include "runtime/ctx.h"
#include "runtime/hash.h"

typedef struct fixture {
    char base[256]; /* a fresh private directory */
    char dir[300];  /* base/cache: where the cache lives */
    kf_mem mem;
} fixture;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    chmod(path, 0700);
    return remove(path);
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    const char *tmp = getenv("TMPDIR");
    snprintf(f->base, sizeof f->base, "%s/kf_cache_test_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(f->base))
        return -1;
    snprintf(f->dir, sizeof f->dir, "%s/cache", f->base);
    kf_mem_resolve(&f->mem, NULL);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    nftw(f->base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

#define F ((fixture *)*state)

static kf_cache *open_cache(fixture *f, unsigned flags, uint64_t max_bytes) {
    kf_cache_options o = {.dir = f->dir,
                          .flags = flags,
                          .max_bytes = max_bytes,
                          .lock_wait_ms = 20000,
                          .stale_lock_ms = 60000};
    kf_cache *c = NULL;
    kf_cache_msg msg;
    kf_status st = kf_cache_open(&f->mem, &o, &c, &msg);
    if (st != KF_OK)
        fail_msg("kf_cache_open: %s: %s", kf_status_str(st), msg.error);
    return c;
}

static kf_cache_key key_of(const char *source) {
    kf_cache_key_parts p = {.source = source,
                            .source_len = strlen(source),
                            .options = "-std=c++17",
                            .arch = "sm_90a",
                            .compiler = "nvrtc 13.0",
                            .codegen_version = 1};
    kf_cache_key k;
    kf_cache_key_build(&p, &k);
    return k;
}

static void entry_path(fixture *f, const kf_cache_key *k, char *out, size_t size) {
    char hex[KF_CACHE_KEY_HEX];
    snprintf(out, size, "%s/%s.kfc", f->dir, kf_cache_key_hex(k, hex));
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void put_str(kf_cache *c, const kf_cache_key *k, const char *s) {
    kf_cache_msg msg;
    kf_status st = kf_cache_put(c, k, s, strlen(s), &msg);
    if (st != KF_OK)
        fail_msg("kf_cache_put: %s", msg.error);
}

/* Asserts a hit holding exactly `s`. */
static void assert_hit(kf_cache *c, const kf_cache_key *k, const char *s) {
    void *data;
    size_t len;
    kf_cache_msg msg;
    kf_status st = kf_cache_get(c, k, &data, &len, &msg);
    if (st != KF_OK)
        fail_msg("expected a hit: %s (%s)", msg.error, msg.note);
    assert_int_equal(len, strlen(s));
    assert_memory_equal(data, s, len);
    kf_cache_blob_free(c, data, len);
}

/* Asserts the entry is reported corrupt, removed and missed. */
static void assert_corrupt_miss(fixture *f, kf_cache *c, const kf_cache_key *k,
                                const char *problem) {
    void *data = (void *)1;
    size_t len = 1;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get(c, k, &data, &len, &msg), KF_ERR_NOT_FOUND);
    assert_null(data);
    assert_int_equal(len, 0);
    assert_true(msg.events & KF_CACHE_EV_CORRUPT);
    if (!strstr(msg.note, problem))
        fail_msg("note '%s' does not say '%s'", msg.note, problem);
    assert_non_null(strstr(msg.note, "removed"));
    char path[512];
    entry_path(f, k, path, sizeof path);
    assert_false(exists(path));
}

/* ------------------------------------------------------------------------ */
/* Digests and keys                                                           */
/* ------------------------------------------------------------------------ */

static void sha256_hex(const void *data, size_t len, char *out) {
    kf_sha256 h;
    uint8_t d[32];
    kf_sha256_init(&h);
    /* feed in uneven pieces to exercise the block buffer */
    const char *p = data;
    size_t step = 1;
    while (len) {
        size_t n = step < len ? step : len;
        kf_sha256_update(&h, p, n);
        p += n;
        len -= n;
        step = step * 3 + 1;
    }
    kf_sha256_final(&h, d);
    kf_cache_key k;
    memcpy(k.bytes, d, 32);
    kf_cache_key_hex(&k, out);
}

static void test_sha256_and_crc32c_match_the_standard_vectors(void **state) {
    (void)state;
    char hex[KF_CACHE_KEY_HEX];
    sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(m, strlen(m), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    sha256_hex(million, 1000000, hex);
    free(million);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    assert_int_equal(kf_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(kf_crc32c(kf_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}

static void test_key_changes_with_every_part_and_round_trips_as_hex(void **state) {
    (void)state;
    kf_cache_key_parts base = {.source = "src",
                               .source_len = 3,
                               .options = "-O3",
                               .arch = "sm_90a",
                               .compiler = "nvrtc 13.0",
                               .codegen_version = 1};
    kf_cache_key k0, k;
    kf_cache_key_build(&base, &k0);
    kf_cache_key_build(&base, &k);
    assert_memory_equal(k0.bytes, k.bytes, 32); /* deterministic */

    kf_cache_key_parts p = base;
    p.arch = "sm_90"; /* the 'a' suffix matters */
    kf_cache_key_build(&p, &k);
    assert_memory_not_equal(k0.bytes, k.bytes, 32);
    p = base;
    p.source = "srd";
    kf_cache_key_build(&p, &k);
    assert_memory_not_equal(k0.bytes, k.bytes, 32);
    p = base;
    p.options = "-O2";
    kf_cache_key_build(&p, &k);
    assert_memory_not_equal(k0.bytes, k.bytes, 32);
    p = base;
    p.compiler = "nvrtc 12.9";
    kf_cache_key_build(&p, &k);
    assert_memory_not_equal(k0.bytes, k.bytes, 32);
    p = base;
    p.codegen_version = 2;
    kf_cache_key_build(&p, &k);
    assert_memory_not_equal(k0.bytes, k.bytes, 32);
    p = base;
    p.options = NULL; /* absent differs from empty */
    kf_cache_key_build(&p, &k);
    kf_cache_key k2;
    p.options = "";
    kf_cache_key_build(&p, &k2);
    assert_memory_not_equal(k2.bytes, k.bytes, 32);
    /* moving bytes between parts changes the key (parts are length-prefixed) */
    kf_cache_key_parts a = base, b = base;
    a.source = "ab";
    a.source_len = 2;
    a.options = "c";
    b.source = "a";
    b.source_len = 1;
    b.options = "bc";
    kf_cache_key_build(&a, &k);
    kf_cache_key_build(&b, &k2);
    assert_memory_not_equal(k2.bytes, k.bytes, 32);

    char hex[KF_CACHE_KEY_HEX];
    kf_cache_key_hex(&k0, hex);
    assert_int_equal(strlen(hex), 64);
    kf_cache_key back;
    assert_true(kf_cache_key_parse(hex, &back));
    assert_memory_equal(back.bytes, k0.bytes, 32);
    assert_false(kf_cache_key_parse("abc", &back));
    hex[5] = 'G';
    assert_false(kf_cache_key_parse(hex, &back));
}

/* ------------------------------------------------------------------------ */
/* The directory                                                              */
/* ------------------------------------------------------------------------ */

static void test_open_creates_the_directory_and_its_parents_0700(void **state) {
    fixture *f = F;
    snprintf(f->dir, sizeof f->dir, "%s/a/b/cache", f->base);
    mode_t old = umask(0);
    kf_cache *c = open_cache(f, 0, 0);
    umask(old);
    assert_string_equal(kf_cache_dir(c), f->dir);
    struct stat sb;
    assert_int_equal(stat(f->dir, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    char parent[400];
    snprintf(parent, sizeof parent, "%s/a", f->base);
    assert_int_equal(stat(parent, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    kf_cache_close(c);
}

static void test_open_refuses_a_directory_writable_by_others_and_says_what_to_chmod(void **state) {
    fixture *f = F;
    assert_int_equal(mkdir(f->dir, 0700), 0);
    assert_int_equal(chmod(f->dir, 0777), 0);
    kf_cache_options o = {.dir = f->dir};
    kf_cache *c = (kf_cache *)1;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_open(&f->mem, &o, &c, &msg), KF_ERR_INVALID_ARGUMENT);
    assert_null(c);
    assert_non_null(strstr(msg.error, "writable by group or others"));
    assert_non_null(strstr(msg.error, "chmod go-w"));
    assert_non_null(strstr(msg.error, f->dir));
    /* group-writable alone is refused too */
    assert_int_equal(chmod(f->dir, 0770), 0);
    assert_int_equal(kf_cache_open(&f->mem, &o, &c, &msg), KF_ERR_INVALID_ARGUMENT);
    /* fixed as the message says, it opens */
    assert_int_equal(chmod(f->dir, 0750), 0);
    assert_int_equal(kf_cache_open(&f->mem, &o, &c, &msg), KF_OK);
    kf_cache_close(c);
}

static void test_open_refuses_a_file_and_read_only_does_not_create(void **state) {
    fixture *f = F;
    kf_cache_options o = {.dir = f->dir, .flags = KF_CACHE_READ_ONLY};
    kf_cache *c;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_open(&f->mem, &o, &c, &msg), KF_ERR_NOT_FOUND);
    assert_false(exists(f->dir));
    assert_non_null(strstr(msg.error, "does not exist"));
    FILE *fp = fopen(f->dir, "w");
    fclose(fp);
    o.flags = 0;
    assert_int_not_equal(kf_cache_open(&f->mem, &o, &c, &msg), KF_OK);
    assert_null(c);
}

static void test_default_dir_is_xdg_then_home_and_ignores_kf_cache_dir(void **state) {
    fixture *f = F;
    char *saved[3];
    const char *names[3] = {"KF_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    for (int i = 0; i < 3; i++)
        saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
    char *d;
    setenv("KF_CACHE_DIR", "/x/kf", 1);
    setenv("XDG_CACHE_HOME", "/x/xdg", 1);
    setenv("HOME", "/x/home", 1);
    /* KF_CACHE_DIR is the CLI's switch (kf_options.cache_dir), not the library's */
    assert_int_equal(kf_cache_default_dir(&f->mem, &d), KF_OK);
    assert_string_equal(d, "/x/xdg/kfuse");
    kf_mem_free(&f->mem, d, strlen(d) + 1);
    unsetenv("KF_CACHE_DIR");
    assert_int_equal(kf_cache_default_dir(&f->mem, &d), KF_OK);
    assert_string_equal(d, "/x/xdg/kfuse");
    kf_mem_free(&f->mem, d, strlen(d) + 1);
    unsetenv("XDG_CACHE_HOME");
    assert_int_equal(kf_cache_default_dir(&f->mem, &d), KF_OK);
    assert_string_equal(d, "/x/home/.cache/kfuse");
    kf_mem_free(&f->mem, d, strlen(d) + 1);
    for (int i = 0; i < 3; i++) {
        if (saved[i])
            setenv(names[i], saved[i], 1);
        else
            unsetenv(names[i]);
        free(saved[i]);
    }
}

/* ------------------------------------------------------------------------ */
/* Hits, misses, corruption                                                   */
/* ------------------------------------------------------------------------ */

static void test_miss_then_put_then_hit_returns_the_same_bytes(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key k = key_of("kernel A");
    void *data;
    size_t len;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get(c, &k, &data, &len, &msg), KF_ERR_NOT_FOUND);
    assert_int_equal(msg.events, 0);
    put_str(c, &k, "payload A");
    assert_hit(c, &k, "payload A");
    /* replacing an entry is allowed (same key, same bytes in practice) */
    put_str(c, &k, "payload A2");
    assert_hit(c, &k, "payload A2");
    /* an empty payload is a valid entry */
    kf_cache_key e = key_of("empty");
    assert_int_equal(kf_cache_put(c, &e, NULL, 0, &msg), KF_OK);
    assert_int_equal(kf_cache_get(c, &e, &data, &len, &msg), KF_OK);
    assert_int_equal(len, 0);
    kf_cache_blob_free(c, data, len);
    /* the entry file is private and no temporary is left behind */
    char path[512];
    entry_path(f, &k, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    size_t n = 0;
    assert_int_equal(kf_cache_verify(c, NULL, NULL, &n, &msg), KF_OK);
    assert_int_equal(n, 0);
    kf_cache_close(c);
}

static void flip_byte(const char *path, long off) {
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

static void test_a_flipped_payload_byte_is_reported_removed_and_missed(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key k = key_of("flip");
    put_str(c, &k, "0123456789abcdef");
    char path[512];
    entry_path(f, &k, path, sizeof path);
    flip_byte(path, 64 + 7);
    assert_corrupt_miss(f, c, &k, "payload checksum mismatch");
    /* and it is rebuilt on the next put */
    put_str(c, &k, "0123456789abcdef");
    assert_hit(c, &k, "0123456789abcdef");
    kf_cache_close(c);
}

static void test_a_flipped_header_byte_anywhere_is_reported_removed_and_missed(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key k = key_of("header");
    /* magic, version, header size, key, length, payload crc, header crc */
    const long offsets[] = {0, 7, 8, 12, 16, 47, 48, 55, 56, 60, 63};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
        put_str(c, &k, "some payload");
        char path[512];
        entry_path(f, &k, path, sizeof path);
        flip_byte(path, offsets[i]);
        assert_corrupt_miss(f, c, &k, offsets[i] < 8 ? "bad magic" : "header checksum mismatch");
    }
    kf_cache_close(c);
}

static void test_truncated_or_extended_entries_are_reported_removed_and_missed(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key k = key_of("trunc");
    const char *payload = "a payload long enough to cut in several places";
    const long total = 64 + (long)strlen(payload);
    const long cuts[] = {0, 1, 8, 63, 64, 65, 64 + 20, total - 1};
    char path[512];
    entry_path(f, &k, path, sizeof path);
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        put_str(c, &k, payload);
        assert_int_equal(truncate(path, cuts[i]), 0);
        assert_corrupt_miss(f, c, &k, "truncated");
    }
    put_str(c, &k, payload);
    FILE *fp = fopen(path, "a");
    fputs("junk", fp);
    fclose(fp);
    assert_corrupt_miss(f, c, &k, "trailing bytes");
    /* a file under a different key's name is not loaded either */
    kf_cache_key other = key_of("other");
    put_str(c, &other, payload);
    char other_path[512];
    entry_path(f, &other, other_path, sizeof other_path);
    assert_int_equal(rename(other_path, path), 0);
    assert_corrupt_miss(f, c, &k, "key in the header differs");
    kf_cache_close(c);
}

/* ------------------------------------------------------------------------ */
/* get_or_compute                                                             */
/* ------------------------------------------------------------------------ */

typedef struct compute_ctx {
    const char *payload;
    const char *counter; /* a file that gets one byte per compute, or NULL */
    int delay_ms;        /* stands in for the compiler's time */
    kf_status fail;      /* != KF_OK: fail with this */
    int calls;
} compute_ctx;

static kf_status compute_fn(void *user, const kf_mem *mem, void **data, size_t *len, char *error) {
    compute_ctx *cc = user;
    cc->calls++;
    if (cc->counter) {
        int fd = open(cc->counter, O_WRONLY | O_APPEND | O_CREAT, 0600);
        if (fd >= 0) {
            (void)!write(fd, "x", 1);
            close(fd);
        }
    }
    if (cc->delay_ms) {
        struct timespec ts = {0, cc->delay_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (cc->fail != KF_OK) {
        snprintf(error, KF_MSG_MAX, "nvrtc: kernel 'k' failed to compile");
        return cc->fail;
    }
    size_t n = strlen(cc->payload);
    char *p = kf_mem_alloc(mem, n);
    if (!p)
        return KF_ERR_OUT_OF_MEMORY;
    memcpy(p, cc->payload, n);
    *data = p;
    *len = n;
    return KF_OK;
}

static void test_get_or_compute_computes_once_then_hits(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key k = key_of("goc");
    compute_ctx cc = {.payload = "cubin bytes"};
    void *data;
    size_t len;
    bool computed;
    kf_cache_msg msg;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(
            kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, &computed, &msg), KF_OK);
        assert_int_equal(computed, i == 0);
        assert_int_equal(len, strlen(cc.payload));
        assert_memory_equal(data, cc.payload, len);
        kf_cache_blob_free(c, data, len);
    }
    assert_int_equal(cc.calls, 1);
    /* no lock is left behind */
    char hex[KF_CACHE_KEY_HEX], lock[512];
    snprintf(lock, sizeof lock, "%s/%s.lock", f->dir, kf_cache_key_hex(&k, hex));
    assert_false(exists(lock));
    kf_cache_close(c);
}

static void test_get_or_compute_passes_a_compile_failure_through_and_stores_nothing(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key k = key_of("broken");
    compute_ctx cc = {.payload = "x", .fail = KF_ERR_INVALID_ARGUMENT};
    void *data;
    size_t len;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, NULL, &msg),
                     KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg.error, "kernel 'k'"));
    char path[512], hex[KF_CACHE_KEY_HEX], lock[512];
    entry_path(f, &k, path, sizeof path);
    assert_false(exists(path));
    snprintf(lock, sizeof lock, "%s/%s.lock", f->dir, kf_cache_key_hex(&k, hex));
    assert_false(exists(lock));
    kf_cache_close(c);
}

static void test_a_payload_that_cannot_be_stored_is_still_returned(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key k = key_of("unstorable");
    char path[512];
    entry_path(f, &k, path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0); /* a directory squats on the entry's name */
    char inside[600];
    snprintf(inside, sizeof inside, "%s/someone's file", path);
    FILE *fp = fopen(inside, "w"); /* not empty: the cache never removes what is inside */
    assert_non_null(fp);
    fclose(fp);
    compute_ctx cc = {.payload = "still useful"};
    void *data;
    size_t len;
    bool computed;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, &computed, &msg),
                     KF_OK);
    assert_true(computed);
    assert_true(msg.events & KF_CACHE_EV_CORRUPT); /* "not a regular file" */
    assert_true(msg.events & KF_CACHE_EV_STORE_FAILED);
    assert_non_null(strstr(msg.note, "not cached"));
    assert_int_equal(len, strlen(cc.payload));
    assert_memory_equal(data, cc.payload, len);
    kf_cache_blob_free(c, data, len);
    kf_cache_close(c);
}

static void run_bounded(void (*fn)(void **), void **state, const char *what);

/* A full disk, made deterministic: the child's files may not grow past 256
 * bytes (RLIMIT_FSIZE, with SIGXFSZ ignored, so write() fails with EFBIG as it
 * would with ENOSPC). Exits 0 when every check held. */
static void store_on_a_full_disk_case(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256, 256};
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
    char big[4096];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = 0;
    /* put: fails, says so, and leaves nothing behind */
    kf_cache_key k = key_of("full disk put");
    kf_cache_msg msg;
    assert_int_equal(kf_cache_put(c, &k, big, strlen(big), &msg), KF_ERR_IO);
    assert_int_equal(msg.store, KF_CACHE_STORE_FAILED);
    assert_non_null(strstr(msg.store_error, "cannot store cache entry"));
    /* get_or_compute: the payload comes back (a compile must not fail for want
     * of a cache), and the store's failure is distinct from success */
    kf_cache_key k2 = key_of("full disk compute");
    compute_ctx cc = {.payload = big};
    void *data = NULL;
    size_t len = 0;
    bool computed = false;
    assert_int_equal(kf_cache_get_or_compute(c, &k2, compute_fn, &cc, &data, &len, &computed, &msg),
                     KF_OK);
    assert_true(computed);
    assert_int_equal(len, strlen(big));
    kf_cache_blob_free(c, data, len);
    assert_int_equal(msg.store, KF_CACHE_STORE_FAILED);
    assert_non_null(strstr(msg.store_error, "(write)"));
    assert_non_null(strstr(msg.note, "not cached"));
    /* a payload that fits is stored, and says so; a hit stores nothing */
    cc.payload = "small";
    kf_cache_key k3 = key_of("fits");
    assert_int_equal(kf_cache_get_or_compute(c, &k3, compute_fn, &cc, &data, &len, &computed, &msg),
                     KF_OK);
    assert_int_equal(msg.store, KF_CACHE_STORE_DONE);
    assert_int_equal(msg.store_error[0], 0);
    kf_cache_blob_free(c, data, len);
    assert_int_equal(kf_cache_get_or_compute(c, &k3, compute_fn, &cc, &data, &len, &computed, &msg),
                     KF_OK);
    assert_false(computed);
    assert_int_equal(msg.store, KF_CACHE_STORE_NONE);
    kf_cache_blob_free(c, data, len);
    kf_cache_close(c);
}

static void
test_a_store_on_a_full_disk_is_reported_distinctly_and_leaves_no_partial_file(void **state) {
    fixture *f = F;
    kf_cache_close(open_cache(f, 0, 0));
    run_bounded(store_on_a_full_disk_case, state, "a store on a full disk");
    /* Only the entry that fit is there: no temporary file, no partial entry. */
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    int entries = 0, temps = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        entries += strstr(e->d_name, ".kfc") != NULL;
        temps += strncmp(e->d_name, ".tmp-", 5) == 0;
    }
    closedir(d);
    assert_int_equal(entries, 1);
    assert_int_equal(temps, 0);
}

static void test_fail_on_miss_names_the_key_and_directory_and_never_computes(void **state) {
    fixture *f = F;
    kf_cache *w = open_cache(f, 0, 0);
    kf_cache_key hit = key_of("present"), miss = key_of("absent");
    put_str(w, &hit, "here");
    kf_cache_close(w);
    kf_cache *c = open_cache(f, KF_CACHE_FAIL_ON_MISS, 0);
    compute_ctx cc = {.payload = "x"};
    void *data;
    size_t len;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get_or_compute(c, &hit, compute_fn, &cc, &data, &len, NULL, &msg),
                     KF_OK);
    kf_cache_blob_free(c, data, len);
    assert_int_equal(kf_cache_get_or_compute(c, &miss, compute_fn, &cc, &data, &len, NULL, &msg),
                     KF_ERR_NOT_FOUND);
    assert_int_equal(cc.calls, 0);
    char hex[KF_CACHE_KEY_HEX];
    assert_non_null(strstr(msg.error, kf_cache_key_hex(&miss, hex)));
    assert_non_null(strstr(msg.error, f->dir));
    assert_non_null(strstr(msg.error, "fail-on-miss"));
    kf_cache_close(c);
}

static void test_read_only_reads_computes_on_miss_and_never_writes(void **state) {
    fixture *f = F;
    kf_cache *w = open_cache(f, 0, 0);
    kf_cache_key hit = key_of("present"), miss = key_of("absent"), bad = key_of("bad");
    put_str(w, &hit, "here");
    put_str(w, &bad, "corrupt me");
    kf_cache_close(w);
    char bad_path[512];
    entry_path(f, &bad, bad_path, sizeof bad_path);
    flip_byte(bad_path, 70);

    kf_cache *c = open_cache(f, KF_CACHE_READ_ONLY, 0);
    assert_hit(c, &hit, "here");
    kf_cache_msg msg;
    assert_int_equal(kf_cache_put(c, &miss, "x", 1, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.error, "read-only"));
    compute_ctx cc = {.payload = "computed"};
    void *data;
    size_t len;
    bool computed;
    assert_int_equal(
        kf_cache_get_or_compute(c, &miss, compute_fn, &cc, &data, &len, &computed, &msg), KF_OK);
    assert_true(computed);
    kf_cache_blob_free(c, data, len);
    char miss_path[512];
    entry_path(f, &miss, miss_path, sizeof miss_path);
    assert_false(exists(miss_path));
    /* a corrupt entry is reported and not loaded, but left in place */
    assert_int_equal(kf_cache_get(c, &bad, &data, &len, &msg), KF_ERR_NOT_FOUND);
    assert_true(msg.events & KF_CACHE_EV_CORRUPT);
    assert_true(exists(bad_path));
    size_t removed;
    assert_int_equal(kf_cache_clear(c, &removed, &msg), KF_ERR_UNSUPPORTED);
    kf_cache_close(c);
}

/* ------------------------------------------------------------------------ */
/* Processes racing on one key                                                */
/* ------------------------------------------------------------------------ */

static void test_eight_processes_racing_on_one_key_compute_it_once_and_all_succeed(void **state) {
    fixture *f = F;
    kf_cache_close(open_cache(f, 0, 0)); /* create the directory */
    char counter[400];
    snprintf(counter, sizeof counter, "%s/counter", f->base);
    int go[2];
    assert_int_equal(pipe(go), 0);
    enum { N = 8 };
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            close(go[1]);
            char b;
            (void)!read(go[0], &b, 1); /* start together: the parent closes the pipe */
            kf_cache_options o = {.dir = f->dir};
            kf_cache *c = NULL;
            if (kf_cache_open(&f->mem, &o, &c, NULL) != KF_OK)
                _exit(2);
            kf_cache_key k = key_of("raced");
            compute_ctx cc = {.payload = "the one cubin", .counter = counter, .delay_ms = 100};
            void *data;
            size_t len;
            kf_status st = kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, NULL, NULL);
            int ok = st == KF_OK && len == strlen(cc.payload) && memcmp(data, cc.payload, len) == 0;
            if (st == KF_OK)
                kf_cache_blob_free(c, data, len);
            kf_cache_close(c);
            _exit(ok ? 0 : 3);
        }
    }
    close(go[0]);
    close(go[1]);
    for (int i = 0; i < N; i++) {
        int ws;
        assert_int_equal(waitpid(kids[i], &ws, 0), kids[i]);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 0);
    }
    struct stat sb;
    assert_int_equal(stat(counter, &sb), 0);
    assert_int_equal(sb.st_size, 1); /* exactly one compile */
}

typedef struct thread_job {
    kf_cache *cache;
    int id;
    int failures;
} thread_job;

static void *thread_worker(void *arg) {
    thread_job *j = arg;
    for (int round = 0; round < 20; round++) {
        char src[64];
        /* half the keys are shared by every thread, half are the thread's own */
        snprintf(src, sizeof src, "key %d", round % 2 ? round : 1000 * j->id + round);
        kf_cache_key k = key_of(src);
        compute_ctx cc = {.payload = "0123456789abcdef0123456789abcdef"};
        void *data;
        size_t len;
        kf_status st =
            kf_cache_get_or_compute(j->cache, &k, compute_fn, &cc, &data, &len, NULL, NULL);
        if (st != KF_OK || len != strlen(cc.payload) || memcmp(data, cc.payload, len) != 0)
            j->failures++;
        if (st == KF_OK)
            kf_cache_blob_free(j->cache, data, len);
    }
    return NULL;
}

static void test_threads_sharing_one_handle_under_a_cap_all_succeed(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 10 * (64 + 32)); /* eviction runs all the time */
    enum { N = 8 };
    pthread_t th[N];
    thread_job jobs[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (thread_job){.cache = c, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, thread_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].failures, 0);
    }
    size_t n_corrupt = 1;
    assert_int_equal(kf_cache_verify(c, NULL, NULL, &n_corrupt, NULL), KF_OK);
    assert_int_equal(n_corrupt, 0);
    kf_cache_close(c);
}

/* Writes a lock file for `k` as process `pid` on this host. */
static void write_lock(fixture *f, const kf_cache_key *k, long pid, char *path, size_t size) {
    char hex[KF_CACHE_KEY_HEX], host[128] = "";
    gethostname(host, sizeof host - 1);
    snprintf(path, size, "%s/%s.lock", f->dir, kf_cache_key_hex(k, hex));
    FILE *fp = fopen(path, "w");
    fprintf(fp, "%ld %s %lld\n", pid, host, (long long)time(NULL) * 1000000000LL);
    fclose(fp);
}

static void test_a_lock_left_by_a_dead_process_is_broken(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0); /* reaped: the pid is gone */
    kf_cache_key k = key_of("stale");
    char lock[512];
    write_lock(f, &k, (long)dead, lock, sizeof lock);
    compute_ctx cc = {.payload = "fresh"};
    void *data;
    size_t len;
    bool computed;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, &computed, &msg),
                     KF_OK);
    assert_true(computed);
    assert_true(msg.events & KF_CACHE_EV_STALE_LOCK);
    assert_non_null(strstr(msg.note, "is gone"));
    kf_cache_blob_free(c, data, len);
    assert_false(exists(lock));
    kf_cache_close(c);
}

static void test_an_old_lock_of_a_live_process_is_broken_after_the_stale_timeout(void **state) {
    fixture *f = F;
    kf_cache_options o = {.dir = f->dir, .stale_lock_ms = 1000};
    kf_cache *c;
    assert_int_equal(kf_cache_open(&f->mem, &o, &c, NULL), KF_OK);
    kf_cache_key k = key_of("old");
    char lock[512];
    write_lock(f, &k, (long)getpid(), lock, sizeof lock); /* alive: us */
    struct timespec old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    assert_int_equal(utimensat(AT_FDCWD, lock, old, 0), 0);
    compute_ctx cc = {.payload = "fresh"};
    void *data;
    size_t len;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, NULL, &msg),
                     KF_OK);
    assert_true(msg.events & KF_CACHE_EV_STALE_LOCK);
    assert_non_null(strstr(msg.note, "ms old"));
    kf_cache_blob_free(c, data, len);
    kf_cache_close(c);
}

static void test_a_live_lock_is_waited_for_then_computed_anyway_after_the_wait_limit(void **state) {
    fixture *f = F;
    kf_cache_options o = {.dir = f->dir, .lock_wait_ms = 50};
    kf_cache *c;
    assert_int_equal(kf_cache_open(&f->mem, &o, &c, NULL), KF_OK);
    kf_cache_key k = key_of("held");
    char lock[512];
    write_lock(f, &k, (long)getpid(), lock, sizeof lock);
    compute_ctx cc = {.payload = "anyway"};
    void *data;
    size_t len;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, NULL, &msg),
                     KF_OK);
    assert_true(msg.events & KF_CACHE_EV_WAITED);
    assert_true(msg.events & KF_CACHE_EV_LOCK_TIMEOUT);
    assert_false(msg.events & KF_CACHE_EV_STALE_LOCK);
    assert_int_equal(cc.calls, 1);
    kf_cache_blob_free(c, data, len);
    assert_true(exists(lock)); /* not ours: left alone */
    assert_hit(c, &k, "anyway");
    kf_cache_close(c);
}

/* ------------------------------------------------------------------------ */
/* A tampered directory: links, FIFOs and directories where files should be    */
/* ------------------------------------------------------------------------ */

static int run_cli(fixture *f, char *out, size_t size, int argc, char **argv);

/* Runs fn(state) in a child that an alarm kills after 10 s: a call that
 * blocks for good or waits out a 20 s lock fails the test instead of hanging
 * it. The child's assertions end it with a non-zero code. */
static void run_bounded(void (*fn)(void **), void **state, const char *what) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10);
        fn(state);
        _exit(0);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws))
        fail_msg("%s: killed by signal %d (blocked or waited more than 10 s)", what, WTERMSIG(ws));
    if (WEXITSTATUS(ws) != 0)
        fail_msg("%s: failed in the child (exit %d)", what, WEXITSTATUS(ws));
}

static void write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static bool file_holds(const char *path, const char *text) {
    char buf[256] = "";
    FILE *fp = fopen(path, "r");
    if (!fp)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    return strcmp(buf, text) == 0;
}

static bool is_regular_no_follow(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* get_or_compute on key k: computes (the squatter is no entry), reports the
 * squatter as corrupt naming `problem`, stores a real entry in its place, and
 * the next get hits. */
static void assert_squatter_replaced(fixture *f, const kf_cache_key *k, const char *problem) {
    kf_cache *c = open_cache(f, 0, 0);
    compute_ctx cc = {.payload = "rebuilt"};
    void *data = NULL;
    size_t len = 0;
    bool computed = false;
    kf_cache_msg msg;
    kf_status st = kf_cache_get_or_compute(c, k, compute_fn, &cc, &data, &len, &computed, &msg);
    if (st != KF_OK)
        fail_msg("get_or_compute over a tampered entry: %s: %s", kf_status_str(st), msg.error);
    assert_true(computed);
    assert_true(msg.events & KF_CACHE_EV_CORRUPT);
    assert_false(msg.events & KF_CACHE_EV_STORE_FAILED);
    if (!strstr(msg.note, problem) && !strstr(msg.error, problem))
        fail_msg("the report '%s' does not say '%s'", msg.note, problem);
    assert_int_equal(len, strlen(cc.payload));
    assert_memory_equal(data, cc.payload, len);
    kf_cache_blob_free(c, data, len);
    char path[512];
    entry_path(f, k, path, sizeof path);
    assert_true(is_regular_no_follow(path));
    assert_hit(c, k, "rebuilt");
    kf_cache_close(c);
}

static void
test_an_entry_symlinked_to_a_valid_entry_elsewhere_is_removed_not_followed(void **state) {
    fixture *f = F;
    /* A valid entry for the same key in another cache directory. */
    char other[400], target[600], path[512], hex[KF_CACHE_KEY_HEX];
    snprintf(other, sizeof other, "%s/other", f->base);
    kf_cache_options o = {.dir = other};
    kf_cache *oc;
    assert_int_equal(kf_cache_open(&f->mem, &o, &oc, NULL), KF_OK);
    kf_cache_key k = key_of("linked");
    put_str(oc, &k, "someone else's kernel");
    kf_cache_close(oc);
    snprintf(target, sizeof target, "%s/%s.kfc", other, kf_cache_key_hex(&k, hex));
    kf_cache_close(open_cache(f, 0, 0)); /* creates the directory */
    entry_path(f, &k, path, sizeof path);
    assert_int_equal(symlink(target, path), 0);
    assert_squatter_replaced(f, &k, "symbolic link");
    /* The link was removed, never its target. */
    kf_cache *oc2;
    assert_int_equal(kf_cache_open(&f->mem, &o, &oc2, NULL), KF_OK);
    assert_hit(oc2, &k, "someone else's kernel");
    kf_cache_close(oc2);
}

static void test_an_entry_symlinked_to_an_unrelated_file_is_removed_not_followed(void **state) {
    fixture *f = F;
    char target[400], path[512];
    snprintf(target, sizeof target, "%s/unrelated.txt", f->base);
    write_file(target, "precious");
    kf_cache_close(open_cache(f, 0, 0));
    kf_cache_key k = key_of("unrelated");
    entry_path(f, &k, path, sizeof path);
    assert_int_equal(symlink(target, path), 0);
    assert_squatter_replaced(f, &k, "symbolic link");
    assert_true(file_holds(target, "precious"));
}

static void fifo_entry_case(void **state) {
    fixture *f = F;
    kf_cache_key k = key_of("fifo");
    assert_squatter_replaced(f, &k, "FIFO");
}

static void test_an_entry_replaced_by_a_fifo_never_blocks_and_is_rebuilt(void **state) {
    fixture *f = F;
    kf_cache_close(open_cache(f, 0, 0));
    kf_cache_key k = key_of("fifo");
    char path[512];
    entry_path(f, &k, path, sizeof path);
    assert_int_equal(mkfifo(path, 0600), 0);
    run_bounded(fifo_entry_case, state, "a FIFO entry");
}

static void test_an_empty_directory_where_an_entry_should_be_is_removed_and_rebuilt(void **state) {
    fixture *f = F;
    kf_cache_close(open_cache(f, 0, 0));
    kf_cache_key k = key_of("dir");
    char path[512];
    entry_path(f, &k, path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_squatter_replaced(f, &k, "directory");
}

static void tampered_lock_case(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0); /* lock_wait_ms 20000: the old wait outlives the alarm */
    kf_cache_key k = key_of("locked");
    compute_ctx cc = {.payload = "computed"};
    void *data = NULL;
    size_t len = 0;
    bool computed = false;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, &computed, &msg),
                     KF_OK);
    assert_true(computed);
    assert_false(msg.events & KF_CACHE_EV_WAITED);
    assert_false(msg.events & KF_CACHE_EV_LOCK_TIMEOUT);
    kf_cache_blob_free(c, data, len);
    assert_hit(c, &k, "computed");
    char hex[KF_CACHE_KEY_HEX], lock[512];
    snprintf(lock, sizeof lock, "%s/%s.lock", f->dir, kf_cache_key_hex(&k, hex));
    struct stat sb;
    assert_true(lstat(lock, &sb) != 0); /* the impostor is gone, and no lock of ours is left */
    kf_cache_close(c);
}

static void test_a_lock_replaced_by_a_symlink_or_a_fifo_is_broken_at_once(void **state) {
    fixture *f = F;
    char target[400], lock[512], hex[KF_CACHE_KEY_HEX];
    snprintf(target, sizeof target, "%s/unrelated.txt", f->base);
    kf_cache_key k = key_of("locked");
    snprintf(lock, sizeof lock, "%s/%s.lock", f->dir, kf_cache_key_hex(&k, hex));
    for (int fifo = 0; fifo < 2; fifo++) {
        teardown(state);
        assert_int_equal(setup(state), 0);
        f = F;
        snprintf(target, sizeof target, "%s/unrelated.txt", f->base);
        snprintf(lock, sizeof lock, "%s/%s.lock", f->dir, hex);
        kf_cache_close(open_cache(f, 0, 0));
        if (fifo) {
            assert_int_equal(mkfifo(lock, 0600), 0);
        } else {
            /* a live-looking lock line in the target: following the link would
             * read a lock held by this very process */
            char line[256], host[128] = "";
            gethostname(host, sizeof host - 1);
            snprintf(line, sizeof line, "%ld %s %lld\n", (long)getpid(), host,
                     (long long)time(NULL) * 1000000000LL);
            write_file(target, line);
            assert_int_equal(symlink(target, lock), 0);
        }
        run_bounded(tampered_lock_case, state, fifo ? "a FIFO lock" : "a symlinked lock");
        if (!fifo)
            assert_true(exists(target)); /* the link was removed, never its target */
    }
}

typedef struct problems {
    int n, corrupt;
    char text[1024];
} problems;

static void collect_problem(void *user, const kf_cache_entry_info *e) {
    problems *p = user;
    p->n++;
    if (e->state == KF_CACHE_ENTRY_CORRUPT) {
        p->corrupt++;
        size_t used = strlen(p->text);
        snprintf(p->text + used, sizeof p->text - used, "%s;", e->problem);
    }
}

static void test_verify_reports_and_removes_links_fifos_and_directories(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key good = key_of("good"), l1 = key_of("link to entry"), l2 = key_of("link to file"),
                 fi = key_of("fifo"), di = key_of("dir");
    put_str(c, &good, "fine");
    char p_good[512], p1[512], p2[512], p3[512], p4[512], target[400];
    entry_path(f, &good, p_good, sizeof p_good);
    entry_path(f, &l1, p1, sizeof p1);
    entry_path(f, &l2, p2, sizeof p2);
    entry_path(f, &fi, p3, sizeof p3);
    entry_path(f, &di, p4, sizeof p4);
    snprintf(target, sizeof target, "%s/unrelated.txt", f->base);
    write_file(target, "precious");
    assert_int_equal(symlink(p_good, p1), 0);
    assert_int_equal(symlink(target, p2), 0);
    assert_int_equal(mkfifo(p3, 0600), 0);
    assert_int_equal(mkdir(p4, 0700), 0);

    problems pr = {0};
    size_t n_corrupt = 0;
    kf_cache_msg msg;
    assert_int_equal(kf_cache_verify(c, collect_problem, &pr, &n_corrupt, &msg), KF_OK);
    assert_int_equal(n_corrupt, 4);
    assert_int_equal(pr.corrupt, 4);
    assert_int_equal(pr.n, 5);
    assert_non_null(strstr(pr.text, "symbolic link"));
    assert_non_null(strstr(pr.text, "FIFO"));
    assert_non_null(strstr(pr.text, "directory"));
    assert_true(msg.events & KF_CACHE_EV_CORRUPT);
    struct stat sb;
    assert_true(lstat(p1, &sb) != 0 && lstat(p2, &sb) != 0 && lstat(p3, &sb) != 0 &&
                lstat(p4, &sb) != 0);
    assert_true(file_holds(target, "precious"));
    assert_hit(c, &good, "fine");
    kf_cache_close(c);

    /* The CLI says so too. */
    assert_int_equal(symlink(target, p2), 0);
    char out[4096];
    char *verify[] = {"cache", "verify", "--dir", f->dir};
    assert_int_equal(run_cli(f, out, sizeof out, 4, verify), 1);
    assert_non_null(strstr(out, "symbolic link"));
    assert_non_null(strstr(out, "1 corrupt (removed)"));
    assert_true(file_holds(target, "precious"));
}

/* ------------------------------------------------------------------------ */
/* Eviction, listing, verifying, clearing                                     */
/* ------------------------------------------------------------------------ */

static void test_the_size_cap_evicts_the_least_recently_used_entry(void **state) {
    fixture *f = F;
    const char *payload = "0123456789012345678901234567890123456789"; /* 40 bytes */
    uint64_t entry = 64 + strlen(payload);
    kf_cache *c = open_cache(f, 0, 3 * entry);
    kf_cache_key a = key_of("A"), b = key_of("B"), cc = key_of("C"), d = key_of("D");
    put_str(c, &a, payload);
    put_str(c, &b, payload);
    put_str(c, &cc, payload);
    assert_hit(c, &a, payload); /* A is now more recent than B */
    kf_cache_msg msg;
    assert_int_equal(kf_cache_put(c, &d, payload, strlen(payload), &msg), KF_OK);
    assert_true(msg.events & KF_CACHE_EV_EVICTED);
    char path[512];
    entry_path(f, &b, path, sizeof path);
    assert_false(exists(path));
    assert_hit(c, &a, payload);
    assert_hit(c, &cc, payload);
    assert_hit(c, &d, payload);
    /* an entry larger than the cap is kept (it was just written); the rest go */
    char big[400];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    kf_cache_key e = key_of("E");
    put_str(c, &e, big);
    assert_hit(c, &e, big);
    entry_path(f, &a, path, sizeof path);
    assert_false(exists(path));
    kf_cache_close(c);
}

typedef struct listing {
    int n, corrupt;
    int64_t last_mtime;
    bool ordered;
} listing;

static void count_entry(void *user, const kf_cache_entry_info *e) {
    listing *l = user;
    l->n++;
    if (e->state == KF_CACHE_ENTRY_CORRUPT)
        l->corrupt++;
    if (e->mtime_ns < l->last_mtime)
        l->ordered = false;
    l->last_mtime = e->mtime_ns;
}

static void test_list_verify_and_clear(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key k[4] = {key_of("1"), key_of("2"), key_of("3"), key_of("4")};
    for (int i = 0; i < 4; i++)
        put_str(c, &k[i], "entry payload");
    char path[512], foreign[512];
    entry_path(f, &k[2], path, sizeof path);
    flip_byte(path, 70);
    snprintf(foreign, sizeof foreign, "%s/README", f->dir);
    FILE *fp = fopen(foreign, "w");
    fclose(fp);

    listing l = {.ordered = true};
    kf_cache_msg msg;
    assert_int_equal(kf_cache_list(c, count_entry, &l, &msg), KF_OK);
    assert_int_equal(l.n, 4); /* listing reads headers only */
    assert_int_equal(l.corrupt, 0);
    assert_true(l.ordered);

    l = (listing){.ordered = true};
    size_t n_corrupt = 0;
    assert_int_equal(kf_cache_verify(c, count_entry, &l, &n_corrupt, &msg), KF_OK);
    assert_int_equal(l.n, 4);
    assert_int_equal(l.corrupt, 1);
    assert_int_equal(n_corrupt, 1);
    assert_true(msg.events & KF_CACHE_EV_CORRUPT);
    assert_false(exists(path));

    size_t removed = 0;
    assert_int_equal(kf_cache_clear(c, &removed, &msg), KF_OK);
    assert_int_equal(removed, 3);
    assert_true(exists(foreign)); /* not the cache's file */
    l = (listing){.ordered = true};
    assert_int_equal(kf_cache_list(c, count_entry, &l, &msg), KF_OK);
    assert_int_equal(l.n, 0);
    kf_cache_close(c);
}

/* ------------------------------------------------------------------------ */
/* Allocation failure                                                         */
/* ------------------------------------------------------------------------ */

static void test_every_allocation_failure_returns_out_of_memory_and_leaks_nothing(void **state) {
    fixture *f = F;
    kf_cache_close(open_cache(f, 0, 0));
    kf_test_alloc ta;
    bool finished = false;
    for (size_t fail_at = 1; !finished && fail_at < 200; fail_at++) {
        kf_test_alloc_reset(&ta, fail_at);
        kf_allocator al = kf_test_allocator(&ta);
        kf_mem mem;
        kf_mem_resolve(&mem, &al);
        /* a fresh directory each round, so every path runs: miss, compute,
         * store, evict, hit, verify */
        char dir[400];
        snprintf(dir, sizeof dir, "%s/oom%zu", f->base, fail_at);
        kf_cache_options o = {.dir = dir, .max_bytes = 1000};
        kf_cache *c = NULL;
        kf_status st = kf_cache_open(&mem, &o, &c, NULL);
        if (st == KF_OK) {
            kf_cache_key k = key_of("oom");
            compute_ctx cc = {.payload = "payload"};
            void *data;
            size_t len;
            st = kf_cache_get_or_compute(c, &k, compute_fn, &cc, &data, &len, NULL, NULL);
            if (st == KF_OK) {
                kf_cache_blob_free(c, data, len);
                st = kf_cache_get(c, &k, &data, &len, NULL);
                if (st == KF_OK) {
                    kf_cache_blob_free(c, data, len);
                    st = kf_cache_verify(c, NULL, NULL, NULL, NULL);
                }
            }
            kf_cache_close(c);
        }
        if (st != KF_OK)
            assert_int_equal(st, KF_ERR_OUT_OF_MEMORY);
        assert_int_equal(ta.live_blocks, 0);
        assert_int_equal(ta.bad_frees, 0);
        finished = st == KF_OK && ta.failures == 0;
    }
    assert_true(finished);
}

/* ------------------------------------------------------------------------ */
/* kfuse cache ls|verify|clear                                                */
/* ------------------------------------------------------------------------ */

/* Runs `kfuse cache ARGS...` with stdout captured into out (NUL-terminated). */
static int run_cli(fixture *f, char *out, size_t size, int argc, char **argv) {
    char path[400];
    snprintf(path, sizeof path, "%s/stdout", f->base);
    fflush(stdout);
    int saved = dup(1);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
    int rc = kf_cmd_cache(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *fp = fopen(path, "rb");
    size_t n = fread(out, 1, size - 1, fp);
    fclose(fp);
    out[n] = 0;
    return rc;
}

static void test_cli_lists_verifies_and_clears(void **state) {
    fixture *f = F;
    kf_cache *c = open_cache(f, 0, 0);
    kf_cache_key a = key_of("cli A"), b = key_of("cli B");
    put_str(c, &a, "payload a");
    put_str(c, &b, "payload b");
    kf_cache_close(c);
    char out[4096], ha[KF_CACHE_KEY_HEX], hb[KF_CACHE_KEY_HEX];
    kf_cache_key_hex(&a, ha);
    kf_cache_key_hex(&b, hb);

    char *ls[] = {"cache", "ls", "--dir", f->dir};
    assert_int_equal(run_cli(f, out, sizeof out, 4, ls), 0);
    assert_true(strncmp(out, "key ", 4) == 0); /* a header names the columns */
    assert_non_null(strstr(out, "payload"));
    assert_non_null(strstr(out, "modified (UTC)"));
    assert_non_null(strstr(out, ha));
    assert_non_null(strstr(out, hb));
    assert_non_null(strstr(out, "2 entries"));

    char path[512];
    entry_path(f, &b, path, sizeof path);
    flip_byte(path, 66);
    char *verify[] = {"cache", "verify", "--dir", f->dir};
    assert_int_equal(run_cli(f, out, sizeof out, 4, verify), 1); /* found corruption */
    assert_non_null(strstr(out, "corrupt"));
    assert_non_null(strstr(out, hb));
    assert_non_null(strstr(out, "1 corrupt (removed)"));
    assert_int_equal(run_cli(f, out, sizeof out, 4, verify), 0); /* healthy now */

    char *clear[] = {"cache", "clear", "--dir", f->dir};
    assert_int_equal(run_cli(f, out, sizeof out, 4, clear), 0);
    assert_non_null(strstr(out, "removed 1 entries"));
    assert_int_equal(run_cli(f, out, sizeof out, 4, ls), 0);
    assert_non_null(strstr(out, "0 entries"));

    char *bad[] = {"cache", "frobnicate"};
    assert_int_equal(run_cli(f, out, sizeof out, 2, bad), 2);
    char *none[] = {"cache"};
    assert_int_equal(run_cli(f, out, sizeof out, 1, none), 2);
    char *help[] = {"cache", "--help"};
    assert_int_equal(run_cli(f, out, sizeof out, 2, help), 0);
    assert_non_null(strstr(out, "usage: kfuse cache"));
    /* an unsafe directory is refused as a usage error, naming the fix */
    assert_int_equal(chmod(f->dir, 0777), 0);
    assert_int_equal(run_cli(f, out, sizeof out, 4, ls), 2);
}

/* ------------------------------------------------------------------------ */
/* The context's cache                                                        */
/* ------------------------------------------------------------------------ */

static void test_a_context_opens_its_cache_once_with_its_flags(void **state) {
    fixture *f = F;
    kf_options o;
    kf_options_init(&o);
    o.cache_dir = f->dir;
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    kf_cache *c1 = NULL, *c2 = NULL;
    char err[KF_MSG_MAX] = "";
    assert_int_equal(kf_ctx_cache(ctx, &c1, err), KF_OK);
    assert_non_null(c1);
    assert_int_equal(kf_ctx_cache(ctx, &c2, err), KF_OK);
    assert_ptr_equal(c1, c2);
    assert_string_equal(kf_cache_dir(c1), f->dir);
    struct stat sb;
    assert_int_equal(stat(f->dir, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    kf_ctx_destroy(ctx);

    /* fail-on-miss carries over */
    o.flags = KF_FLAG_CACHE_FAIL_ON_MISS;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    assert_int_equal(kf_ctx_cache(ctx, &c1, err), KF_OK);
    kf_cache_key k = key_of("ctx");
    compute_ctx cc = {.payload = "x"};
    void *data;
    size_t len;
    assert_int_equal(kf_cache_get_or_compute(c1, &k, compute_fn, &cc, &data, &len, NULL, NULL),
                     KF_ERR_NOT_FOUND);
    kf_ctx_destroy(ctx);

    /* no cache at all */
    o.flags = KF_FLAG_NO_CACHE;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    c1 = (kf_cache *)1;
    assert_int_equal(kf_ctx_cache(ctx, &c1, err), KF_OK);
    assert_null(c1);
    kf_ctx_destroy(ctx);

    /* an unsafe directory: the same refusal every time */
    assert_int_equal(chmod(f->dir, 0777), 0);
    o.flags = 0;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    assert_int_equal(kf_ctx_cache(ctx, &c1, err), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "chmod go-w"));
    err[0] = 0;
    assert_int_equal(chmod(f->dir, 0700), 0);
    assert_int_equal(kf_ctx_cache(ctx, &c1, err), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "chmod go-w"));
    kf_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_and_crc32c_match_the_standard_vectors),
        cmocka_unit_test(test_key_changes_with_every_part_and_round_trips_as_hex),
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_open_creates_the_directory_and_its_parents_0700),
        T(test_open_refuses_a_directory_writable_by_others_and_says_what_to_chmod),
        T(test_open_refuses_a_file_and_read_only_does_not_create),
        T(test_default_dir_is_xdg_then_home_and_ignores_kf_cache_dir),
        T(test_miss_then_put_then_hit_returns_the_same_bytes),
        T(test_a_flipped_payload_byte_is_reported_removed_and_missed),
        T(test_a_flipped_header_byte_anywhere_is_reported_removed_and_missed),
        T(test_truncated_or_extended_entries_are_reported_removed_and_missed),
        T(test_get_or_compute_computes_once_then_hits),
        T(test_get_or_compute_passes_a_compile_failure_through_and_stores_nothing),
        T(test_a_payload_that_cannot_be_stored_is_still_returned),
        T(test_a_store_on_a_full_disk_is_reported_distinctly_and_leaves_no_partial_file),
        T(test_fail_on_miss_names_the_key_and_directory_and_never_computes),
        T(test_read_only_reads_computes_on_miss_and_never_writes),
        T(test_eight_processes_racing_on_one_key_compute_it_once_and_all_succeed),
        T(test_threads_sharing_one_handle_under_a_cap_all_succeed),
        T(test_a_lock_left_by_a_dead_process_is_broken),
        T(test_an_old_lock_of_a_live_process_is_broken_after_the_stale_timeout),
        T(test_a_live_lock_is_waited_for_then_computed_anyway_after_the_wait_limit),
        T(test_an_entry_symlinked_to_a_valid_entry_elsewhere_is_removed_not_followed),
        T(test_an_entry_symlinked_to_an_unrelated_file_is_removed_not_followed),
        T(test_an_entry_replaced_by_a_fifo_never_blocks_and_is_rebuilt),
        T(test_an_empty_directory_where_an_entry_should_be_is_removed_and_rebuilt),
        T(test_a_lock_replaced_by_a_symlink_or_a_fifo_is_broken_at_once),
        T(test_verify_reports_and_removes_links_fifos_and_directories),
        T(test_the_size_cap_evicts_the_least_recently_used_entry),
        T(test_list_verify_and_clear),
        T(test_every_allocation_failure_returns_out_of_memory_and_leaks_nothing),
        T(test_cli_lists_verifies_and_clears),
        T(test_a_context_opens_its_cache_once_with_its_flags),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
