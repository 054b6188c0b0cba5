// The secure channel's AEADs over caller-owned buffers (aead.cc).
#pragma once

#include <napi.h>

namespace kvf {

// the addon's Gcm class: AES-256-GCM through node's OpenSSL
Napi::Function DefineGcm(Napi::Env env);
// the addon's Aegis256x4 class: AEGIS-256X4 through the vendored libaegis
Napi::Function DefineAegis256x4(Napi::Env env);
// whether this CPU runs AEGIS-256X4 (x86: AES-NI and AVX)
bool aegis256x4Runs();

}  // namespace kvf
