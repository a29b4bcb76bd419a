// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord and
// TensorBoard event files, and its "masked" form those files store:
// ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC of data holding CRCs is not
// itself trivially structured.
#pragma once

#include <cstddef>
#include <cstdint>

namespace triad::io {

uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace triad::io
