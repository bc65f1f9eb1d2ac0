/*
 * cache.h -- the on-disk kernel cache: a directory of immutable entries, each
 * a blob (a CUBIN, later anything codegen wants to keep) stored under a
 * 256-bit key that covers everything that changes the blob.
 *
 * The promises a team can rely on (DESIGN.md, "Runtime rules"):
 *
 *   1. A key is SHA-256 over every input of the compile, each part length-
 *      prefixed and tagged (kf_cache_key_build): the generated source, the
 *      compile options, the exact arch ("sm_90a" is not "sm_90"), the compiler
 *      version and kfuse's codegen version. Change any of them, get a new key.
 *   2. An entry is a fixed 64-byte header (magic, format version, key, payload
 *      length, payload CRC32C, header CRC32C) and the payload. An entry whose
 *      header, length or checksum does not agree is reported (KF_CACHE_EV_CORRUPT
 *      and a note naming the file and what is wrong), removed, and treated as a
 *      miss. It is never returned. Entries and locks are opened without following
 *      links and without blocking (O_NOFOLLOW | O_NONBLOCK) and must be regular
 *      files of this user: a symbolic link (to anything), a FIFO, a directory or
 *      another user's file in an entry's place is a corrupt entry like any other
 *      (the link itself is removed, never its target; a directory only when
 *      empty), and in a lock's place it is removed at once instead of waited on.
 *      kf_cache_list and kf_cache_verify report each one.
 *   3. Writes go to a temporary file in the same directory, are fsync'ed, renamed
 *      into place and the directory fsync'ed: a reader sees a whole entry or
 *      none, even across a crash.
 *   4. Processes that miss the same key at once compute it once: a lock file per
 *      key (created with O_EXCL, holding pid, host and time) makes the others
 *      wait with bounded backoff and then read the entry. A lock whose process
 *      is dead (same host) or that is older than the stale timeout is broken.
 *      Correctness never depends on the lock -- entries are written atomically
 *      and are a pure function of their key -- so the rare race it loses costs
 *      a duplicate compile, never a wrong or torn entry.
 *   5. The directory is created 0700 (parents too); a directory that is not
 *      owned by the user or is writable by group or others is refused, with a
 *      message that says what to chmod: anyone who can write it could make this
 *      process run their code.
 *   6. With a size cap, every write is followed by eviction of the least
 *      recently used entries (mtime, set on write and on every hit) until the
 *      total fits; the entry just written is never evicted.
 *
 * A kf_cache holds only immutable state after kf_cache_open (the directory fd,
 * options), so several threads may use one handle at once; the file system
 * provides all the synchronization. Every allocation goes through the kf_mem.
 */
#ifndef KF_RUNTIME_CACHE_H
#define KF_RUNTIME_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

/* ------------------------------------------------------------------------ */
/* Keys                                                                       */
/* ------------------------------------------------------------------------ */

#define KF_CACHE_KEY_BYTES 32
#define KF_CACHE_KEY_HEX (2 * KF_CACHE_KEY_BYTES + 1) /* with the NUL */

typedef struct kf_cache_key {
    uint8_t bytes[KF_CACHE_KEY_BYTES];
} kf_cache_key;

/* Everything that changes a compiled kernel. Strings may be NULL (hashed as
 * absent, which differs from ""). `source` is `source_len` bytes. */
typedef struct kf_cache_key_parts {
    const char *source;
    size_t source_len;
    const char *options;  /* the compile options, canonical (kf_nvrtc_options_string) */
    const char *arch;     /* exact: "sm_90a" */
    const char *compiler; /* compiler and version: "nvrtc 13.0" */
    uint32_t codegen_version;
} kf_cache_key_parts;

void kf_cache_key_build(const kf_cache_key_parts *parts, kf_cache_key *out);
/* Lower-case hex, KF_CACHE_KEY_HEX bytes with the NUL. Returns `out`. */
char *kf_cache_key_hex(const kf_cache_key *key, char *out);
/* Parses 64 hex digits; false on anything else. */
bool kf_cache_key_parse(const char *hex, kf_cache_key *out);

/* ------------------------------------------------------------------------ */
/* The cache                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct kf_cache kf_cache;

enum {
    KF_CACHE_READ_ONLY = 1u << 0,    /* never create, write, touch or remove anything */
    KF_CACHE_FAIL_ON_MISS = 1u << 1, /* kf_cache_get_or_compute: a miss is an error */
};

typedef struct kf_cache_options {
    const char *dir;        /* NULL: kf_cache_default_dir() */
    unsigned flags;         /* KF_CACHE_* */
    uint64_t max_bytes;     /* 0: no cap */
    uint32_t lock_wait_ms;  /* how long a waiter waits for a live lock; 0: 120000 */
    uint32_t stale_lock_ms; /* a lock older than this is broken; 0: 600000 */
} kf_cache_options;

/* Events a call reports alongside its status (bitwise or in kf_cache_msg). */
enum {
    KF_CACHE_EV_CORRUPT = 1u << 0,      /* a corrupt or truncated entry was removed */
    KF_CACHE_EV_STALE_LOCK = 1u << 1,   /* a stale lock was broken */
    KF_CACHE_EV_LOCK_TIMEOUT = 1u << 2, /* gave up waiting for a live lock; computed anyway */
    KF_CACHE_EV_EVICTED = 1u << 3,      /* entries were evicted to fit the cap */
    KF_CACHE_EV_WAITED = 1u << 4,       /* waited on another process's lock */
    KF_CACHE_EV_STORE_FAILED = 1u << 5, /* get_or_compute: computed, but could not lock or store */
};

/* Whether a call stored an entry. A caller that must fill the cache (kfuse
 * aot) counts KF_CACHE_STORE_FAILED: get_or_compute still returns KF_OK and the
 * payload then, because a compile must not fail for want of a cache, so the
 * status alone cannot say the entry is missing. */
typedef enum kf_cache_store {
    KF_CACHE_STORE_NONE = 0, /* nothing to store: a hit, a read-only cache, a failed compute */
    KF_CACHE_STORE_DONE,     /* an entry was written and renamed into place */
    KF_CACHE_STORE_FAILED,   /* an entry should have been written and was not (a full disk,
                                a read-only directory): no partial file is left; store_error
                                says why */
    KF_CACHE_STORE_COUNT
} kf_cache_store;

/* What a call has to say. `error` explains a failed status; `note` describes
 * the last event (a corrupt entry removed, a lock broken) for the caller to
 * print or log: the cache never prints. All always NUL-terminated. */
typedef struct kf_cache_msg {
    char error[KF_MSG_MAX];
    char note[KF_MSG_MAX];
    unsigned events;
    kf_cache_store store;
    char store_error[KF_MSG_MAX]; /* why the store failed; "" otherwise */
} kf_cache_msg;

/* The directory a cache uses when none is given: the platform's cache
 * location, $XDG_CACHE_HOME/kfuse, else $HOME/.cache/kfuse (KF_CACHE_DIR is
 * the CLI's: it maps it onto kf_options.cache_dir). *out is allocated with `mem`
 * (strlen + 1 bytes). Errors: KF_ERR_NOT_FOUND (no variable set), OOM. */
kf_status kf_cache_default_dir(const kf_mem *mem, char **out);

/* Opens (creating it and its parents 0700 unless read-only) and checks the
 * directory. Errors: KF_ERR_INVALID_ARGUMENT (not a directory; not owned by
 * the user or writable by group/others: the message says what to chmod),
 * KF_ERR_NOT_FOUND (read-only and missing), KF_ERR_IO, KF_ERR_OUT_OF_MEMORY. */
kf_status kf_cache_open(const kf_mem *mem, const kf_cache_options *options, kf_cache **out,
                        kf_cache_msg *msg);
void kf_cache_close(kf_cache *cache);
/* The directory, as opened. */
const char *kf_cache_dir(const kf_cache *cache);

/* Looks `key` up. A hit returns KF_OK with the payload in *data (allocated with
 * the cache's kf_mem, *len bytes; free with kf_cache_blob_free) and marks the
 * entry recently used. A miss, or a corrupt entry (removed, reported in msg),
 * returns KF_ERR_NOT_FOUND. */
kf_status kf_cache_get(kf_cache *cache, const kf_cache_key *key, void **data, size_t *len,
                       kf_cache_msg *msg);
/* Stores `len` bytes under `key` atomically, replacing any entry, then evicts
 * to fit the cap; msg->store says DONE or FAILED (a failed write leaves no
 * temporary file and no partial entry). Read-only caches return
 * KF_ERR_UNSUPPORTED. */
kf_status kf_cache_put(kf_cache *cache, const kf_cache_key *key, const void *data, size_t len,
                       kf_cache_msg *msg);
void kf_cache_blob_free(const kf_cache *cache, void *data, size_t len);

/* Produces the payload of a key on a miss: allocates *data with `mem` (the
 * cache's), sets *len, or returns an error with a message in `error`
 * (KF_MSG_MAX bytes). */
typedef kf_status (*kf_cache_compute_fn)(void *user, const kf_mem *mem, void **data, size_t *len,
                                         char *error);

/* get, else compute once across processes (promise 4), store and return it.
 * *computed says whether this call ran `compute`. A payload that was computed
 * but could not be stored is still returned with KF_OK: msg->store is then
 * KF_CACHE_STORE_FAILED (and msg->store_error says why), the one sign that the
 * entry is not in the cache. A read-only cache computes
 * on a miss without storing; with KF_CACHE_FAIL_ON_MISS a miss is KF_ERR_NOT_FOUND naming the key
 * and the directory. */
kf_status kf_cache_get_or_compute(kf_cache *cache, const kf_cache_key *key,
                                  kf_cache_compute_fn compute, void *user, void **data, size_t *len,
                                  bool *computed, kf_cache_msg *msg);

/* ------------------------------------------------------------------------ */
/* Listing, verifying, clearing                                               */
/* ------------------------------------------------------------------------ */

typedef enum kf_cache_entry_state {
    KF_CACHE_ENTRY_OK = 0,
    KF_CACHE_ENTRY_CORRUPT, /* header, length, key or checksum disagree */
    KF_CACHE_ENTRY_COUNT
} kf_cache_entry_state;

typedef struct kf_cache_entry_info {
    char key_hex[KF_CACHE_KEY_HEX];
    uint64_t file_bytes;        /* the whole file */
    uint64_t payload_bytes;     /* from the header (0 when it does not read) */
    int64_t mtime_ns;           /* last use */
    kf_cache_entry_state state; /* kf_cache_verify only; kf_cache_list says OK */
    char problem[128];          /* what is wrong when CORRUPT */
} kf_cache_entry_info;

typedef void (*kf_cache_entry_fn)(void *user, const kf_cache_entry_info *entry);

/* Calls `fn` for every entry, least recently used first. Reads headers only. */
kf_status kf_cache_list(kf_cache *cache, kf_cache_entry_fn fn, void *user, kf_cache_msg *msg);
/* Reads every entry in full; calls `fn` (may be NULL) for each with its state;
 * removes the corrupt ones unless read-only. *n_corrupt counts them. */
kf_status kf_cache_verify(kf_cache *cache, kf_cache_entry_fn fn, void *user, size_t *n_corrupt,
                          kf_cache_msg *msg);
/* Removes every entry and every leftover temporary file; *n_removed counts
 * entries. Locks held by live processes are left alone. */
kf_status kf_cache_clear(kf_cache *cache, size_t *n_removed, kf_cache_msg *msg);

#endif /* KF_RUNTIME_CACHE_H */
