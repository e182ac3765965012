#include "http/http2_memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace sidelock::http {
namespace {

// Each block starts with its Header; nghttp2 gets the bytes after it (16 bytes in: malloc's
// alignment is kept).
struct Header {
  size_t size_class;  // kLarge for a block from malloc of its own size
  size_t bytes;       // what the caller can use
};
constexpr size_t kHeaderBytes = 16;
static_assert(sizeof(Header) <= kHeaderBytes);

Header* headerOf(void* ptr) {
  return reinterpret_cast<Header*>(static_cast<char*>(ptr) - kHeaderBytes);
}

#if defined(SIDELOCK_ASAN) || defined(__SANITIZE_ADDRESS__)
constexpr size_t kKeptBlocks = 0;
#else
constexpr size_t kKeptBlocks = 256;
#endif

}  // namespace

Http2Memory::Http2Memory()
    : mem_{this,
           [](size_t size, void* self) { return static_cast<Http2Memory*>(self)->allocate(size); },
           [](void* ptr, void* self) { static_cast<Http2Memory*>(self)->release(ptr); },
           [](size_t count, size_t size, void* self) {
             return static_cast<Http2Memory*>(self)->allocateZeroed(count, size);
           },
           [](void* ptr, size_t size, void* self) {
             return static_cast<Http2Memory*>(self)->resize(ptr, size);
           }} {}

Http2Memory::~Http2Memory() {
  for (FreeBlock*& head : free_) {
    while (head != nullptr) free(std::exchange(head, head->next));
  }
}

void* Http2Memory::allocate(size_t size) {
  constexpr size_t kLarge = kClasses;
  if (size > kClasses * kClassBytes - kHeaderBytes) {
    if (size > SIZE_MAX - kHeaderBytes) return nullptr;
    void* block = malloc(kHeaderBytes + size);
    if (block == nullptr) return nullptr;
    *static_cast<Header*>(block) = Header{kLarge, size};
    return static_cast<char*>(block) + kHeaderBytes;
  }
  const size_t size_class = (kHeaderBytes + size - 1) / kClassBytes;
  void* block = free_[size_class];
  if (block != nullptr) {
    free_[size_class] = free_[size_class]->next;
    --kept_[size_class];
  } else {
    block = malloc((size_class + 1) * kClassBytes);
    if (block == nullptr) return nullptr;
  }
  *static_cast<Header*>(block) = Header{size_class, (size_class + 1) * kClassBytes - kHeaderBytes};
  return static_cast<char*>(block) + kHeaderBytes;
}

void Http2Memory::release(void* ptr) {
  if (ptr == nullptr) return;
  Header* header = headerOf(ptr);
  const size_t size_class = header->size_class;
  if (size_class >= kClasses || kept_[size_class] >= kKeptBlocks) {
    free(header);
    return;
  }
  auto* block = reinterpret_cast<FreeBlock*>(header);
  block->next = free_[size_class];
  free_[size_class] = block;
  ++kept_[size_class];
}

void* Http2Memory::allocateZeroed(size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size) return nullptr;
  void* ptr = allocate(count * size);
  if (ptr != nullptr) memset(ptr, 0, count * size);
  return ptr;
}

void* Http2Memory::resize(void* ptr, size_t size) {
  if (ptr == nullptr) return allocate(size);
  if (size == 0) {
    release(ptr);
    return nullptr;
  }
  const size_t usable = headerOf(ptr)->bytes;
  if (size <= usable) return ptr;
  void* grown = allocate(size);
  if (grown == nullptr) return nullptr;
  memcpy(grown, ptr, usable);
  release(ptr);
  return grown;
}

}  // namespace sidelock::http
