// Containers: Sequential (chains single-input modules; children named "0", "1", ...) and
// ModuleList (holds modules for the owner to call, as timm's blocks).
#pragma once
#include <initializer_list>

#include "nn/module.h"

namespace vitrine::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Appends a module under the next index; returns it.
  std::shared_ptr<Module> push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

class ModuleList : public Module {
 public:
  ModuleList() = default;
  std::shared_ptr<Module> push_back(std::shared_ptr<Module> m);
  std::string type_name() const override { return "ModuleList"; }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  /// The i-th module as its concrete type (error if it is another type).
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    VT_CHECK(m != nullptr, "ModuleList: item {} is a {}, not the requested type", i,
             (*this)[i]->type_name());
    return m;
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

}  // namespace vitrine::nn
