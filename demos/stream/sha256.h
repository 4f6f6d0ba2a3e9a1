/* SHA-256 (FIPS 180-4), for stream-bench --verify: what was sent and what came back, compared
 * by their digests. */
#ifndef EVRDMA_DEMOS_STREAM_SHA256_H
#define EVRDMA_DEMOS_STREAM_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
  uint32_t state[8];
  uint64_t length; /* bytes hashed */
  uint8_t block[64];
  size_t used; /* bytes in block */
};

void sha256_init(struct sha256 *hash);
void sha256_update(struct sha256 *hash, const void *data, size_t length);
/* The digest as 64 hex digits and a terminating zero. */
void sha256_hex(struct sha256 *hash, char out[65]);

#endif
