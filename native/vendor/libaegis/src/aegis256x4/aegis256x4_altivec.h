#ifndef aegis256x4_altivec_H
#define aegis256x4_altivec_H

#include "../common/common.h"
#include "implementations.h"

extern struct aegis256x4_implementation aegis256x4_altivec_implementation;

#endif