// The bounded single-producer/single-consumer token ring the stream executor connects actors with.
#include <cstring>
#include <new>

#include "cnnbench/core.hpp"
#include "cnnbench/stream.hpp"

namespace cnnbench::stream {

namespace {
constexpr std::size_t cache_line = 64;

std::size_t round_up(std::size_t bytes, std::size_t to) { return (bytes + to - 1) / to * to; }

std::byte* allocate_payload(std::size_t bytes) {
  return static_cast<std::byte*>(::operator new(bytes == 0 ? cache_line : bytes,
                                                std::align_val_t(cache_line)));
}
void free_payload(std::byte* p) { ::operator delete(p, std::align_val_t(cache_line)); }
}  // namespace

Channel::Channel(std::size_t capacity, std::size_t payload_bytes)
    : capacity_(capacity),
      payload_bytes_(payload_bytes),
      slot_stride_(round_up(payload_bytes, cache_line)),
      headers_(capacity),
      payload_(nullptr, free_payload) {
  CNNBENCH_CHECK(capacity >= 1, "a stream channel needs room for at least one token");
  payload_.reset(allocate_payload(slot_stride_ * capacity));
  if (slot_stride_ * capacity > 0) std::memset(payload_.get(), 0, slot_stride_ * capacity);
}

TokenRef Channel::slot(std::uint64_t position) {
  const std::size_t index = static_cast<std::size_t>(position % capacity_);
  return {&headers_[index], payload_.get() + index * slot_stride_, payload_bytes_};
}

// Each side re-reads the other's position only when its cached view shows too little, so the
// shared cache line moves once per refill rather than once per token.
bool Channel::has_room(std::size_t n) {
  const std::uint64_t write = write_position_.load(std::memory_order_relaxed);
  if (capacity_ - static_cast<std::size_t>(write - producer_seen_read_) >= n) return true;
  producer_seen_read_ = read_position_.load(std::memory_order_acquire);
  return capacity_ - static_cast<std::size_t>(write - producer_seen_read_) >= n;
}

std::size_t Channel::writable() {
  producer_seen_read_ = read_position_.load(std::memory_order_acquire);
  return capacity_ -
         static_cast<std::size_t>(write_position_.load(std::memory_order_relaxed) -
                                  producer_seen_read_);
}

TokenRef Channel::write_slot(std::size_t k) {
  return slot(write_position_.load(std::memory_order_relaxed) + k);
}

void Channel::push(std::size_t n) {
  write_position_.store(write_position_.load(std::memory_order_relaxed) + n,
                        std::memory_order_release);
}

bool Channel::has_tokens(std::size_t n) {
  const std::uint64_t read = read_position_.load(std::memory_order_relaxed);
  if (static_cast<std::size_t>(consumer_seen_write_ - read) >= n) return true;
  consumer_seen_write_ = write_position_.load(std::memory_order_acquire);
  return static_cast<std::size_t>(consumer_seen_write_ - read) >= n;
}

std::size_t Channel::readable() {
  consumer_seen_write_ = write_position_.load(std::memory_order_acquire);
  return static_cast<std::size_t>(consumer_seen_write_ -
                                  read_position_.load(std::memory_order_relaxed));
}

TokenRef Channel::read_slot(std::size_t k) {
  return slot(read_position_.load(std::memory_order_relaxed) + k);
}

void Channel::pop(std::size_t n) {
  read_position_.store(read_position_.load(std::memory_order_relaxed) + n,
                       std::memory_order_release);
}

}  // namespace cnnbench::stream
