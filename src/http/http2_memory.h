// nghttp2's allocator (nghttp2_mem) for the sessions of one thread: Http2Server's, and the
// benchmark's gRPC client (tests/bench/grpc_load.cc). Every HTTP/2 call makes nghttp2 allocate and
// free a dozen small blocks of a few sizes (its stream, each frame's outbound item, the copies of
// header fields, HPACK's decoded fields); glibc's malloc and free cost ~1 600 instructions per
// acquire+release pair there (callgrind, tests/bench/callgrind_pairs.sh). Freed blocks of up to
// 1 KiB are kept on one free list per 64-byte size class and handed out again: a pop and a push.
// At most 256 are kept per class (~2 MiB over all classes); more go back to malloc, as do larger
// blocks. Under AddressSanitizer nothing is kept, so that it still sees every block nghttp2 uses.
#pragma once

#include <nghttp2/nghttp2.h>

#include <array>
#include <cstddef>

namespace sidelock::http {

class Http2Memory {
 public:
  Http2Memory();
  /// Frees the kept blocks: every session using mem() must be gone first.
  ~Http2Memory();
  Http2Memory(const Http2Memory&) = delete;
  Http2Memory& operator=(const Http2Memory&) = delete;

  /// For nghttp2_session_server_new3 / client_new3 (which copy the struct; `this` must outlive
  /// the sessions). One thread only, as the sessions.
  nghttp2_mem* mem() { return &mem_; }

  void* allocate(size_t size);
  void release(void* ptr);
  void* allocateZeroed(size_t count, size_t size);
  /// realloc's contract: null `ptr` allocates; size 0 frees and returns null; on failure the old
  /// block is untouched.
  void* resize(void* ptr, size_t size);

 private:
  static constexpr size_t kClassBytes = 64;
  static constexpr size_t kClasses = 16;
  struct FreeBlock {
    FreeBlock* next;
  };

  nghttp2_mem mem_;
  std::array<FreeBlock*, kClasses> free_{};
  std::array<size_t, kClasses> kept_{};
};

}  // namespace sidelock::http
