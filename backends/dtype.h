// Element types. float32/float64 compute everywhere; int64 holds labels and indices; bool holds
// masks; bfloat16/float16 are storage types on the CPU (convert with to(float32) to compute).
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

#include "backends/error.h"

namespace vitrine {

enum class DType : uint8_t { Float32, Float64, Int64, Bool, BFloat16, Float16 };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;
constexpr DType kBool = DType::Bool;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kFloat16 = DType::Float16;

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int64:
      return 8;
    case DType::Bool:
      return 1;
    case DType::BFloat16:
      return 2;
    case DType::Float16:
      return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float16:
      return "float16";
  }
  return "?";
}

/// float32 and float64: the types the CPU computes in.
constexpr bool is_float(DType t) { return t == DType::Float32 || t == DType::Float64; }
/// float32, float64 and the 16-bit storage types.
constexpr bool is_floating_point(DType t) {
  return is_float(t) || t == DType::BFloat16 || t == DType::Float16;
}

// 16-bit conversions, round to nearest even (as PyTorch / the IEEE default).
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::Float64;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}

/// Calls f.template operator()<T>() with T = float or double; other dtypes are an error naming op.
template <typename F>
decltype(auto) dispatch_float(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    default:
      fail("{}: dtype {} is not supported (expected float32 or float64)", op, dtype_name(t));
  }
}

/// As dispatch_float, plus int64.
template <typename F>
decltype(auto) dispatch_numeric(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    default:
      fail("{}: dtype {} is not supported (expected float32, float64 or int64)", op, dtype_name(t));
  }
}

/// Every dtype with a C++ compute type (bool included; 16-bit types excluded).
template <typename F>
decltype(auto) dispatch_all(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    case DType::Bool:
      return f.template operator()<bool>();
    default:
      fail("{}: dtype {} is a storage type here (convert with to(float32) first)", op,
           dtype_name(t));
  }
}

}  // namespace vitrine
