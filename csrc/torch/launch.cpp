// launch.cpp: wavepe::launch for every family -- the CPU plans over the
// intra-op thread pool, and the hand-over to launch_cuda.cpp for CUDA tensors.
//
// Every family's plan has the same shape (csrc/core/<family>.h): phases of
// independent units, each unit computed the same whatever the split, so
// results are identical run to run and for any number of threads.  The plan
// sizes its units; this file only hands ranges of them to torch's intra-op
// thread pool (torch::stable::parallel_for: torch's threads, torch's OpenMP).
#include "launch.h"

#include <atomic>
#include <memory>

namespace wavepe {
namespace {

// The functions of one family's plan.
template <class Plan>
struct PlanOps {
    int64_t (*units)(const Plan*, int);
    int64_t (*grain)(const Plan*, int);
    int (*run)(Plan*, int, int64_t, int64_t);
    void (*free)(Plan*);
};

constexpr int kMaxPhases = 3;  // every family's phases are 0 .. 2 at most (later ones have no units)

// Create a plan (create(&plan, &err) returns a status), then run its phases over the thread pool.
template <class Plan, class Create>
void run_plan(Create create, const PlanOps<Plan>& ops, const char* what) {
    Plan* raw = nullptr;
    wavepe_error err{};
    check_status(create(&raw, &err), err, what);
    const std::unique_ptr<Plan, void (*)(Plan*)> plan(raw, ops.free);
    for (int phase = 0; phase < kMaxPhases; ++phase) {
        const int64_t units = ops.units(plan.get(), phase);
        if (units <= 0) continue;
        std::atomic<int> status{WAVEPE_OK};
        parallel_for(units, ops.grain(plan.get(), phase), [&](int64_t b, int64_t e) {
            const int s = ops.run(plan.get(), phase, b, e);
            if (s != WAVEPE_OK) status.store(s);
        });
        check_status(status.load(), wavepe_error{}, what);
    }
}

// The devices with kernels: the CPU here, CUDA in launch_cuda.cpp.
bool on_cuda(const Tensor& like, const char* what) {
    WAVEPE_CHECK_VALUE(like.is_cpu() || like.is_cuda(), what, ": no wavepe kernel for device ", device_name(like));
    return like.is_cuda();
}

}  // namespace

#if !WAVEPE_WITH_CUDA
// Built without the CUDA kernels: no CUDA dispatch key is registered, so only a direct call gets here.
[[noreturn]] static void no_cuda(const char* what) { fail_runtime(str(what, ": wavepe was built without CUDA kernels")); }
void launch_cuda(const wavepe_relbias_args&, unsigned, const Tensor&, const char* what) { no_cuda(what); }
void launch_cuda(const wavepe_alibi_args&, const Tensor&, const char* what) { no_cuda(what); }
void launch_cuda(const wavepe_rope_args&, const Tensor&, const char* what) { no_cuda(what); }
void launch_cuda(const wavepe_attention_args&, bool, const Tensor&, const char* what) { no_cuda(what); }
#endif

void launch(const wavepe_relbias_args& a, unsigned kernels, const Tensor& like, const char* what) {
    if (on_cuda(like, what)) return launch_cuda(a, kernels, like, what);
    const int64_t threads = num_threads();
    run_plan<wavepe_relbias_plan>(
        [&](wavepe_relbias_plan** p, wavepe_error* e) {
            return wavepe_relbias_plan_create(wavepe::active_isa(), &a, kernels, threads, p, e);
        },
        {wavepe_relbias_units, wavepe_relbias_grain, wavepe_relbias_run, wavepe_relbias_plan_free}, what);
}

void launch(const wavepe_alibi_args& a, const Tensor& like, const char* what) {
    if (on_cuda(like, what)) return launch_cuda(a, like, what);
    run_plan<wavepe_alibi_plan>(
        [&](wavepe_alibi_plan** p, wavepe_error* e) { return wavepe_alibi_plan_create(wavepe::active_isa(), &a, p, e); },
        {wavepe_alibi_units, wavepe_alibi_grain, wavepe_alibi_run, wavepe_alibi_plan_free}, what);
}

void launch(const wavepe_rope_args& a, const Tensor& like, const char* what) {
    if (on_cuda(like, what)) return launch_cuda(a, like, what);
    run_plan<wavepe_rope_plan>(
        [&](wavepe_rope_plan** p, wavepe_error* e) { return wavepe_rope_plan_create(wavepe::active_isa(), &a, p, e); },
        {wavepe_rope_units, wavepe_rope_grain, wavepe_rope_run, wavepe_rope_plan_free}, what);
}

void launch(const wavepe_attention_args& a, bool backward, const Tensor& like, const char* what) {
    if (on_cuda(like, what)) return launch_cuda(a, backward, like, what);
    run_plan<wavepe_attention_plan>(
        [&](wavepe_attention_plan** p, wavepe_error* e) {
            return backward ? wavepe_attention_bwd_plan(wavepe::active_isa(), &a, p, e)
                            : wavepe_attention_fwd_plan(wavepe::active_isa(), &a, p, e);
        },
        {wavepe_attention_units, wavepe_attention_grain, wavepe_attention_run, wavepe_attention_plan_free}, what);
}

}  // namespace wavepe
