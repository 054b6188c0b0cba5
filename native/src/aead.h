// AES-256-GCM over caller-owned buffers, for the secure channel (aead.cc).
#pragma once

#include <napi.h>

namespace kvf {

// the addon's Gcm class
Napi::Function DefineGcm(Napi::Env env);

}  // namespace kvf
