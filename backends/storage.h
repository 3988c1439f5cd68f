// Storage: one allocation on one device, shared by a tensor and all its views. It also holds the
// version counter that in-place ops bump, so that every view sees the same version.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "backends/device.h"

namespace vitrine {

struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::function<void(void*)> deleter;  // returns the memory to the backend's allocator
  uint64_t version = 0;                // bumped by every in-place write

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (data && deleter) deleter(data);
  }
};

using StoragePtr = std::shared_ptr<Storage>;

}  // namespace vitrine
