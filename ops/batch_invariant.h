// Batch-invariant mode (docs/distributed.md, "The same bits on any number of ranks"): the CPU's
// sums over a batch in one fixed tree of 8-image leaves; its convolutions leaf by leaf, each leaf
// on one thread; its products on the whole batch where the own GEMM gives each row the same bits
// at any M (AVX-512), else leaf by leaf too. Then a training step gives the same bits on 1 or 2
// threads, and data-parallel ranks (SyncBatchNorm included) or gradient accumulation give one
// process's bits on the whole batch. Off by default: where the batched convolution kernels and
// the own GEMM run (AVX-512, a Zen 5) it trains ResNet-8 as fast as the default path and the
// default ViT about 2% slower; on an AVX2 Zen 1 it is faster (docs/distributed.md, "Cost").
#pragma once

namespace vitrine {

/// Turns batch-invariant mode on or off for the process (VITRINE_BATCH_TREE=1 turns it on at
/// start). As torch.use_deterministic_algorithms, a process-wide switch.
void set_batch_invariant(bool on);
/// Whether batch-invariant mode is on.
bool is_batch_invariant();

}  // namespace vitrine
