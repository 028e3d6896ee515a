#ifndef aegis128x4_aesni_H
#define aegis128x4_aesni_H

#include "../common/common.h"
#include "implementations.h"

extern struct aegis128x4_implementation aegis128x4_aesni_implementation;

#endif