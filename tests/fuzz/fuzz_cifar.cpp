// CIFAR binary record files (CIFAR-10, CIFAR-100 fine and coarse labels).
#include "fuzz_util.h"
#include "nn/data/cifar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using vitrine::nn::data::CifarFormat;
  const CifarFormat format = data[0] % 3 == 0   ? CifarFormat::Cifar10
                             : data[0] % 3 == 1 ? CifarFormat::Cifar100Fine
                                                : CifarFormat::Cifar100Coarse;
  const std::string& path = vt_fuzz::write_input(data + 1, size - 1, ".bin");
  vt_fuzz::expect_clean([&] {
    vitrine::nn::data::CifarDataset ds({path}, format, {});
    for (int64_t i = 0; i < ds.size() && i < 4; ++i) (void)ds.get(i);
  });
  return 0;
}
