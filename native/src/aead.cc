// The secure channel's AEADs (src/wire/frame-aead.ts), each writing into buffers the caller owns: a receiver deciphers
// each socket read straight into the frame's plaintext buffer, a sender seals a frame's pages into one buffer that
// becomes the wire frame (docs/protocol.md §8 measures them).
// - `Aegis256x4`: AEGIS-256X4 (draft-irtf-cfrg-aegis-aead) from the vendored libaegis (native/vendor/libaegis), which
//   picks AVX-512 VAES, AVX2 VAES, AES-NI or ARM crypto at load time; the cipher two peers with this addon agree on.
// - `Gcm`: AES-256-GCM through the OpenSSL that node itself carries (node exports its libcrypto's symbols to addons
//   and ships its headers beside node_api.h), so node:crypto's own cipher without node:crypto's per-call allocations;
//   what runs against a peer without the addon.
//
// One object per direction of a channel, a small state machine (idle → started → idle) that refuses calls out of
// order; a tag that fails, or an update that throws, ends the frame (idle again: the next frame starts afresh); a
// finish refused for its arguments leaves the frame open.
// AEGIS works in 64-byte blocks and holds back the last partial block of what it was given (at most 63 bytes), which
// it writes on the next call just before that call's `at`, or at the finish just before `end`: all the calls of one
// frame write one contiguous run of one output buffer (both users do). `dispose` cleanses and frees the key and the
// state now; the finalizer does the same for one nobody disposed. (libaegis's calls leave copies of the state on their
// own stack frames, which it does not wipe.)
#include "aead.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

extern "C" {
#include "../vendor/libaegis/src/common/cpu.h"
#include "../vendor/libaegis/src/include/aegis.h"
}

namespace kvf {
namespace {

constexpr size_t kKeyBytes = 32;
constexpr size_t kTagBytes = 16;
// OpenSSL's lengths are ints: one call takes at most 1 GiB here (frames are far smaller: LIMITS.transferFrameBytesMax)
constexpr size_t kCallBytesMax = size_t{1} << 30;

struct Bytes {
  uint8_t* data;
  size_t length;
};

Bytes bytesOf(Napi::Env env, const Napi::Value& v, const char* name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(env, std::string(name) + " must be a Uint8Array");
  }
  auto a = v.As<Napi::Uint8Array>();
  return {a.Data(), a.ByteLength()};
}

// an offset into a buffer of `length` bytes, checked as a double before any cast (a cast of an out-of-range double is
// undefined); throws unless it is an integer in [0, length]
size_t offsetOf(Napi::Env env, const Napi::Value& v, size_t length, const char* name) {
  if (!v.IsNumber()) throw Napi::TypeError::New(env, std::string(name) + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d != std::floor(d) || d > static_cast<double>(length)) {
    throw Napi::RangeError::New(env, std::string(name) + " is not an offset into the output");
  }
  return static_cast<size_t>(d);
}

bool overlap(const uint8_t* a, size_t aLength, const uint8_t* b, size_t bLength) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return aLength > 0 && bLength > 0 && x < y + bLength && y < x + aLength;
}

// AES-256-GCM through node's OpenSSL: a stream mode, so it writes every byte at once and holds nothing back
class GcmCipher {
 public:
  static constexpr size_t kNonceBytes = 12;

  bool init(const uint8_t* key, bool seal) {
    ctx_ = EVP_CIPHER_CTX_new();
    // EVP_Cipher*: one set of calls for both directions, chosen here once (later inits pass -1: keep it)
    return ctx_ != nullptr && EVP_CipherInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key, nullptr, seal ? 1 : 0) == 1;
  }
  bool start(const uint8_t* nonce, const uint8_t* aad, size_t aadLength) {
    int n = 0;
    return EVP_CipherInit_ex(ctx_, nullptr, nullptr, nullptr, nonce, -1) == 1 &&
           EVP_CipherUpdate(ctx_, nullptr, &n, aad, static_cast<int>(aadLength)) == 1;
  }
  // writes `length` bytes at dst (room: `room`); *written: how many
  bool update(uint8_t* dst, size_t /*room*/, const uint8_t* src, size_t length, size_t* written) {
    int n = 0;
    const bool ok = EVP_CipherUpdate(ctx_, dst, &n, src, static_cast<int>(length)) == 1;
    *written = static_cast<size_t>(n);
    // a stream mode: OpenSSL writes every byte it is given at once; anything else would misplace the next call
    return ok && *written == length;
  }
  bool finishSeal(uint8_t* /*tail*/, size_t /*held*/, uint8_t* tag) {
    int n = 0;
    return EVP_EncryptFinal_ex(ctx_, nullptr, &n) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), tag) == 1;
  }
  bool finishOpen(uint8_t* /*tail*/, size_t /*held*/, const uint8_t* tag) {
    int n = 0;
    return EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), const_cast<uint8_t*>(tag)) ==
               1 &&
           EVP_DecryptFinal_ex(ctx_, nullptr, &n) == 1;
  }
  bool live() const { return ctx_ != nullptr; }
  void free() {
    EVP_CIPHER_CTX_free(ctx_);  // cleanses the expanded key; a null context is a no-op
    ctx_ = nullptr;
  }

 private:
  EVP_CIPHER_CTX* ctx_ = nullptr;
};

}  // namespace

// libaegis picks among its forms at load, and where the CPU has no AES instructions it falls back to a table-based AES
// (slow, and not constant-time): such a CPU gets no AEGIS at all, and its channels agree on AES-256-GCM instead
bool aegis256x4Runs() {
  if (aegis_init() != 0) return false;
#if defined(__x86_64__) || defined(__i386__)
  return aegis_runtime_has_aesni() != 0 && aegis_runtime_has_avx() != 0;
#elif defined(__aarch64__) || defined(_M_ARM64)
  return aegis_runtime_has_armcrypto() != 0;
#else
  return false;
#endif
}

namespace {

// AEGIS-256X4 through libaegis's incremental calls; each frame's state is made afresh from the key and its nonce
class AegisCipher {
 public:
  static constexpr size_t kNonceBytes = aegis256x4_NPUBBYTES;

  bool init(const uint8_t* key, bool seal) {
    if (!aegis256x4Runs()) return false;
    seal_ = seal;
    std::memcpy(key_, key, kKeyBytes);
    live_ = true;
    return true;
  }
  bool start(const uint8_t* nonce, const uint8_t* aad, size_t aadLength) {
    aegis256x4_state_init(&state_, aad, aadLength, nonce, key_);
    return true;
  }
  bool update(uint8_t* dst, size_t room, const uint8_t* src, size_t length, size_t* written) {
    return (seal_ ? aegis256x4_state_encrypt_update(&state_, dst, room, written, src, length)
                  : aegis256x4_state_decrypt_detached_update(&state_, dst, room, written, src, length)) == 0;
  }
  bool finishSeal(uint8_t* tail, size_t held, uint8_t* tag) {
    size_t written = 0;
    return aegis256x4_state_encrypt_detached_final(&state_, tail, held, &written, tag, kTagBytes) == 0 &&
           written == held;
  }
  // a tag that fails zeroes the held-back tail; the caller discards the rest
  bool finishOpen(uint8_t* tail, size_t held, const uint8_t* tag) {
    size_t written = 0;
    return aegis256x4_state_decrypt_detached_final(&state_, tail, held, &written, tag, kTagBytes) == 0 &&
           written == held;
  }
  bool live() const { return live_; }
  void free() {
    OPENSSL_cleanse(key_, sizeof key_);
    OPENSSL_cleanse(&state_, sizeof state_);
    live_ = false;
  }

 private:
  aegis256x4_state state_{};
  uint8_t key_[kKeyBytes] = {};
  bool seal_ = true;
  bool live_ = false;
};

template <typename Cipher>
class FrameCipher : public Napi::ObjectWrap<FrameCipher<Cipher>> {
  using Self = FrameCipher<Cipher>;

 public:
  static Napi::Function Define(Napi::Env env, const char* name) {
    return Self::DefineClass(
        env, name,
        {Self::template InstanceMethod<&Self::Start>("start"), Self::template InstanceMethod<&Self::Update>("update"),
         Self::template InstanceMethod<&Self::FinishSeal>("finishSeal"),
         Self::template InstanceMethod<&Self::FinishOpen>("finishOpen"),
         Self::template InstanceMethod<&Self::Dispose>("dispose")});
  }

  // new <cipher>(key: 32 bytes, seal: boolean)
  explicit FrameCipher(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Self>(info) {
    const Napi::Env env = info.Env();
    if (info.Length() != 2 || !info[1].IsBoolean()) throw Napi::TypeError::New(env, "new AEAD(key, seal)");
    const Bytes key = bytesOf(env, info[0], "the key");
    if (key.length != kKeyBytes) throw Napi::RangeError::New(env, "the key must be 32 bytes");
    seal_ = info[1].As<Napi::Boolean>().Value();
    if (!cipher_.init(key.data, seal_)) {
      cipher_.free();
      throw Napi::Error::New(env, "the AEAD could not be set up on this CPU");
    }
  }

  ~FrameCipher() override { cipher_.free(); }

 private:
  // start(nonce, aad): begins a frame
  void Start(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    live(env);
    if (started_) throw Napi::Error::New(env, "a frame was started and not finished");
    if (info.Length() != 2) throw Napi::TypeError::New(env, "start(nonce, aad)");
    const Bytes nonce = bytesOf(env, info[0], "the nonce");
    const Bytes aad = bytesOf(env, info[1], "the AAD");
    if (nonce.length != Cipher::kNonceBytes) {
      throw Napi::RangeError::New(env, "the nonce must be " + std::to_string(Cipher::kNonceBytes) + " bytes");
    }
    if (aad.length > kCallBytesMax) throw Napi::RangeError::New(env, "the AAD is too long");
    if (!cipher_.start(nonce.data, aad.data, aad.length)) throw Napi::Error::New(env, "the AEAD could not start a frame");
    held_ = 0;
    started_ = true;
  }

  // update(input, output, at): the input's bytes, sealed or opened, into output[at, at + input.length), less what is
  // held back, with the bytes the last call held back written just before `at`. The input may be the very bytes at
  // `at` (in place) but must not overlap what is written otherwise. A call that throws ends the frame.
  void Update(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    frame(env);
    started_ = false;  // until this call has done its part
    if (info.Length() != 3) throw Napi::TypeError::New(env, "update(input, output, at)");
    const Bytes in = bytesOf(env, info[0], "the input");
    const Bytes out = bytesOf(env, info[1], "the output");
    const size_t at = offsetOf(env, info[2], out.length, "at");
    if (in.length > out.length - at) throw Napi::RangeError::New(env, "the output has no room for the input at that offset");
    if (in.length > kCallBytesMax) throw Napi::RangeError::New(env, "the input is too long for one call");
    if (at < held_) throw Napi::RangeError::New(env, "the bytes held back from the last call go just before `at`");
    uint8_t* dst = out.data + at - held_;
    // the one bound on what the cipher writes (libaegis's decrypt update checks its room against the wrong count)
    const size_t room = held_ + in.length;
    if (in.data != out.data + at && overlap(in.data, in.length, dst, room)) {
      throw Napi::RangeError::New(env, "the input and the output overlap (only the very same bytes may be both)");
    }
    size_t written = 0;
    if (!cipher_.update(dst, room, in.data, in.length, &written) || written > room) {
      throw Napi::Error::New(env, "the AEAD update failed");
    }
    held_ = room - written;
    started_ = true;
  }

  // finishSeal(tag: 16 bytes out, output, end): ends a sealed frame, the held-back bytes written just before `end`
  void FinishSeal(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    frame(env);
    if (!seal_) throw Napi::Error::New(env, "this AEAD opens; finishOpen ends its frames");
    const Finish f = finishOf(info, "finishSeal(tag, output, end)");
    started_ = false;
    if (!cipher_.finishSeal(f.tail, held_, f.tag)) throw Napi::Error::New(env, "the AEAD could not finish a frame");
  }

  // finishOpen(tag: 16 bytes, output, end) → whether the frame is authentic: false means nothing it deciphered may be
  // used
  Napi::Value FinishOpen(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    frame(env);
    if (seal_) throw Napi::Error::New(env, "this AEAD seals; finishSeal ends its frames");
    const Finish f = finishOf(info, "finishOpen(tag, output, end)");
    started_ = false;
    return Napi::Boolean::New(env, cipher_.finishOpen(f.tail, held_, f.tag));
  }

  // dispose(): cleanses and frees the key and the state now; later calls throw
  void Dispose(const Napi::CallbackInfo&) {
    cipher_.free();
    started_ = false;
  }

  struct Finish {
    uint8_t* tag;
    uint8_t* tail;
  };

  // a finish's arguments: the frame's 16-byte tag, and where the held-back bytes go (they end at output[end])
  Finish finishOf(const Napi::CallbackInfo& info, const char* call) const {
    const Napi::Env env = info.Env();
    if (info.Length() != 3) throw Napi::TypeError::New(env, call);
    const Bytes tag = bytesOf(env, info[0], "the tag");
    if (tag.length != kTagBytes) throw Napi::RangeError::New(env, "the tag must be 16 bytes");
    const Bytes out = bytesOf(env, info[1], "the output");
    const size_t end = offsetOf(env, info[2], out.length, "end");
    if (end < held_) throw Napi::RangeError::New(env, "the held-back bytes go just before `end`");
    uint8_t* tail = out.data + end - held_;
    if (overlap(tag.data, tag.length, tail, held_)) throw Napi::RangeError::New(env, "the tag overlaps the output");
    return {tag.data, tail};
  }

  void live(Napi::Env env) const {
    if (!cipher_.live()) throw Napi::Error::New(env, "this AEAD was disposed");
  }
  void frame(Napi::Env env) const {
    live(env);
    if (!started_) throw Napi::Error::New(env, "no frame was started");
  }

  Cipher cipher_;
  bool seal_ = true;
  bool started_ = false;
  // bytes given to the cipher and not yet written (AEGIS's partial block)
  size_t held_ = 0;
};

}  // namespace

Napi::Function DefineGcm(Napi::Env env) { return FrameCipher<GcmCipher>::Define(env, "Gcm"); }
Napi::Function DefineAegis256x4(Napi::Env env) { return FrameCipher<AegisCipher>::Define(env, "Aegis256x4"); }

}  // namespace kvf
