#ifndef aegis128x4_neon_aes_H
#define aegis128x4_neon_aes_H

#include "../common/common.h"
#include "implementations.h"

extern struct aegis128x4_implementation aegis128x4_neon_aes_implementation;

#endif
