#ifndef aegis256x4_soft_H
#define aegis256x4_soft_H

#include "../common/common.h"
#include "implementations.h"

extern struct aegis256x4_implementation aegis256x4_soft_implementation;

#endif