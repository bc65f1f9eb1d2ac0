/*
 * hash.h -- the two digests the runtime needs: SHA-256 for disk-cache keys
 * (a collision would load the wrong kernel, so the key is cryptographic) and
 * CRC32C for entry checksums (it only has to catch torn or flipped bytes).
 * Both are small, table-free or table-built-once, and need no allocation.
 */
#ifndef KF_RUNTIME_HASH_H
#define KF_RUNTIME_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct kf_sha256 {
    uint32_t state[8];
    uint64_t length; /* bytes hashed so far */
    uint8_t block[64];
    size_t fill; /* bytes waiting in block */
} kf_sha256;

void kf_sha256_init(kf_sha256 *h);
void kf_sha256_update(kf_sha256 *h, const void *data, size_t len);
/* Writes the 32-byte digest; `h` must be re-initialized before reuse. */
void kf_sha256_final(kf_sha256 *h, uint8_t digest[32]);

/* CRC32C (Castagnoli), continuing from `crc` (0 to start). */
uint32_t kf_crc32c(uint32_t crc, const void *data, size_t len);

#endif /* KF_RUNTIME_HASH_H */
