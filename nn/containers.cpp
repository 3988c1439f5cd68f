#include "nn/containers.h"

namespace vitrine::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

std::shared_ptr<Module> Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(items_.size()), m);
  items_.push_back(m);
  return m;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : items_) y = (*m)(y);
  return y;
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  VT_CHECK(i < items_.size(), "Sequential: index {} is out of range (size {})", i, items_.size());
  return items_[i];
}

std::shared_ptr<Module> ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(items_.size()), m);
  items_.push_back(m);
  return m;
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  VT_CHECK(i < items_.size(), "ModuleList: index {} is out of range (size {})", i, items_.size());
  return items_[i];
}

}  // namespace vitrine::nn
