// The process group's collectives on Tensors (backends/dist/process_group.h says what each
// computes). The tensors must be contiguous; a reduction writes its result in place. None of
// these is differentiable: they run under no-grad on data (gradients, parameters, metrics).
// `group` defaults to the world's group for the tensor's device (MPI for CPU tensors, NCCL for
// CUDA ones).
#pragma once
#include <memory>
#include <string>

#include "autograd/tensor.h"
#include "backends/dist/process_group.h"

namespace vitrine::dist {

/// t's memory as a collective's buffer; an Error names `op` when t is not contiguous.
Buffer buffer(const Tensor& t, const char* op);

/// t = op over ranks of t (in place).
void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);
/// Starts all_reduce(t); t must stay alive and untouched until the Work's wait().
std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::Sum,
                                       ProcessGroup* group = nullptr);
/// t = t of rank `root` (in place).
void broadcast(const Tensor& t, int root = 0, ProcessGroup* group = nullptr);
/// [size, *t.shape]: row r is rank r's t.
Tensor all_gather(const Tensor& t, ProcessGroup* group = nullptr);
/// t: [size * n, ...]; returns rank r's n rows of (op over ranks of t).
Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);
/// Rank `root`'s s, on every rank (a run folder's name chosen by rank 0).
std::string broadcast_string(const std::string& s, int root = 0, ProcessGroup* group = nullptr);
/// Returns when every rank has called it.
void barrier(ProcessGroup* group = nullptr);

}  // namespace vitrine::dist
