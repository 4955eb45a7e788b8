// cuda_emu.cpp: the runtime of the CPU emulator (see cuda_emu.h).
//
// A launch runs its blocks one after another.  Each thread of a block is a
// fiber with its own stack; a fiber runs until it reaches a barrier
// (__syncthreads, __syncwarp, or a warp's exchange -- a shuffle, an ldmatrix,
// an mma -- whose last lane to arrive does the whole warp's work through
// per-warp slots and releases it: warp_collective) and then yields to the
// scheduler.  After every round the scheduler releases a barrier once all
// live threads of its scope wait at it, and checks that they wait at the
// same source line.  No progress with threads left is a deadlock and fails
// the launch with a message (wavepe_emu_last_message()).
#include <atomic>
#include "cuda_emu.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <cxxabi.h>
#include <dlfcn.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace wavepe_emu {
namespace {

constexpr size_t kStackBytes = 512 * 1024;
constexpr size_t kSmemGuard = 256;
constexpr unsigned char kGuardByte = 0xA5;

enum class State { Ready, WaitBlock, WaitWarp, Done };

struct PendingCopy {
    void *dst;
    const void *src;
    int src_bytes, total_bytes;
    long group;
};

// What the race check knows of a word of dynamic shared memory: the warp whose cp.async into it is in
// flight (issued, not yet retired by its cp.async.wait_group), the warp and barrier epoch of the last
// copy that landed, and the warps that read it by ldmatrix in the epoch r_epoch.
struct RaceWord {
    int inflight_warp = -1, w_warp = -1, w_epoch = -1, r_epoch = -1;
    uint32_t r_warps = 0;
};

struct Fiber {
#if defined(__x86_64__)
    void *sp = nullptr;
#else
    ucontext_t ctx;
#endif
    unsigned char *stack = nullptr;
    State state = State::Ready;
    const char *file = nullptr;
    int line = 0;
    ThreadState ts{};
    int warp = 0, lane = 0;
    std::vector<PendingCopy> copies;  // cp.async not yet retired
    long open_group = 0;              // group the next cp.async joins
};

struct Emu {
    std::mutex mutex;  // one launch at a time
    std::vector<Fiber> fibers;
    std::vector<unsigned char> slots;  // warps * 32 * kSlotBytes
    std::vector<int> collective_arrived;  // a warp's lanes waiting at a warp_collective
    std::vector<unsigned char> smem;
    size_t smem_bytes = 0;
    Fiber *cur = nullptr;
#if defined(__x86_64__)
    void *sched_sp = nullptr;
#else
    ucontext_t sched_ctx;
#endif
    const std::function<void()> *body = nullptr;
    uint3 block_idx{};
    dim3 block_dim, grid_dim;
    std::map<const void *, int> max_dyn_smem;
    cudaError_t last_error = cudaSuccess;
    std::string message;
    bool failed = false;
    std::string launches;  // a launch's dynamic shared memory a line, since wavepe_emu_launch_log last read it
    std::set<const void *> named;  // the kernels written to WAVEPE_EMU_KERNEL_LOG's file named_in (log_kernel)
    std::string named_in;
    // the shared-memory race check: block barriers released so far in this block, and per 4-byte word of
    // dynamic shared memory who touched it (RaceWord)
    int epoch = 0;
    std::vector<struct RaceWord> words;
};

// one emulator a process (a namespace-scope object, not a function's static: emu() is called for every lane's
// every access to its thread state, and a guarded static's call was ~5 % of the emulator's time)
Emu g_emu;
inline Emu &emu() { return g_emu; }

thread_local std::string t_message;

int env_int(const char *name, int dflt) {
    const char *v = std::getenv(name);
    return v && *v ? std::atoi(v) : dflt;
}

#if defined(__x86_64__)
extern "C" void wavepe_emu_switch(void **save_sp, void *new_sp);
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *save_sp, and resumes the stack new_sp.  The FP control words
// (MXCSR, the x87 control word) are not switched: the fibers and the scheduler
// share one OS thread and nothing here changes its rounding or exception
// modes -- storing and loading them was ~80 % of a switch's time (fldcw, ldmxcsr).
// The 8 bytes below the registers keep the frame 16-byte aligned.
asm(R"(
    .pushsection .text
    .globl wavepe_emu_switch
    .hidden wavepe_emu_switch
    .type wavepe_emu_switch,@function
wavepe_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size wavepe_emu_switch, .-wavepe_emu_switch
    .popsection
)");
#endif

void fail(const std::string &msg) {
    Emu &e = emu();
    if (!e.failed) {
        e.failed = true;
        e.message = msg;
    }
}

void yield_to_scheduler() {
    Emu &e = emu();
#if defined(__x86_64__)
    wavepe_emu_switch(&e.cur->sp, e.sched_sp);
#else
    swapcontext(&e.cur->ctx, &e.sched_ctx);
#endif
}

void resume(Fiber &f) {
    Emu &e = emu();
    e.cur = &f;
#if defined(__x86_64__)
    wavepe_emu_switch(&e.sched_sp, f.sp);
#else
    swapcontext(&e.sched_ctx, &f.ctx);
#endif
    e.cur = nullptr;
}

void fiber_entry() {
    Emu &e = emu();
    (*e.body)();
    e.cur->state = State::Done;
    yield_to_scheduler();
    std::abort();  // a finished fiber is never resumed
}

void init_fiber(Fiber &f) {
    if (f.stack == nullptr) f.stack = static_cast<unsigned char *>(std::malloc(kStackBytes));
#if defined(__x86_64__)
    // Frame that wavepe_emu_switch pops: 8 bytes of padding, six callee-saved
    // registers, then the address it returns to (fiber_entry), above it a
    // fake return address so that fiber_entry sees an ABI-aligned stack.
    uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStackBytes) & ~uintptr_t(15);
    uint64_t *sp = reinterpret_cast<uint64_t *>(top);
    *--sp = 0;                                               // fake return address of fiber_entry
    *--sp = reinterpret_cast<uint64_t>(&fiber_entry);        // ret target
    for (int i = 0; i < 6; ++i) *--sp = 0;                   // rbp rbx r12 r13 r14 r15
    *--sp = 0;                                               // padding
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, &fiber_entry, 0);
#endif
    f.state = State::Ready;
    f.file = nullptr;
    f.line = 0;
    f.copies.clear();
    f.open_group = 0;
}

std::string where(const Fiber &f) {
    return std::string(f.file ? f.file : "?") + ":" + std::to_string(f.line);
}

// Release barriers whose scope is complete; false when a check failed.
bool release_barriers(bool &released) {
    Emu &e = emu();
    released = false;
    // warps
    const int nwarps = int((e.fibers.size() + 31) / 32);
    for (int w = 0; w < nwarps; ++w) {
        size_t lo = size_t(w) * 32, hi = std::min(e.fibers.size(), lo + 32);
        size_t waiting = 0, done = 0;
        for (size_t i = lo; i < hi; ++i) {
            waiting += e.fibers[i].state == State::WaitWarp;
            done += e.fibers[i].state == State::Done;
        }
        if (waiting == 0) continue;
        if (waiting + done != hi - lo) continue;  // lanes still running or at a block barrier
        if (done != 0) {
            fail("warp barrier (shuffle/__syncwarp/mma) reached by some lanes while others exited, at " +
                 where(e.fibers[lo + (e.fibers[lo].state == State::Done ? hi - lo - 1 : 0)]));
            return false;
        }
        for (size_t i = lo; i < hi; ++i) {
            if (e.fibers[i].line != e.fibers[lo].line ||
                std::strcmp(e.fibers[i].file, e.fibers[lo].file) != 0) {
                fail("lanes of warp " + std::to_string(w) + " wait at different warp barriers: " +
                     where(e.fibers[lo]) + " and " + where(e.fibers[i]));
                return false;
            }
        }
        for (size_t i = lo; i < hi; ++i) e.fibers[i].state = State::Ready;
        released = true;
    }
    // block
    size_t waiting = 0, done = 0;
    const Fiber *first = nullptr;
    for (const Fiber &f : e.fibers) {
        if (f.state == State::WaitBlock) {
            ++waiting;
            if (!first) first = &f;
        }
        done += f.state == State::Done;
    }
    if (waiting != 0 && waiting + done == e.fibers.size()) {
        if (done != 0) {
            fail("__syncthreads at " + where(*first) + " reached while some threads of the block exited");
            return false;
        }
        for (const Fiber &f : e.fibers) {
            if (f.state == State::WaitBlock && (f.line != first->line || std::strcmp(f.file, first->file) != 0)) {
                fail("threads of a block wait at different __syncthreads: " + where(*first) + " and " + where(f));
                return false;
            }
        }
        for (Fiber &f : e.fibers)
            if (f.state == State::WaitBlock) f.state = State::Ready;
        ++e.epoch;
        released = true;
    }
    return true;
}

bool run_block(std::mt19937 &rng, int order) {
    Emu &e = emu();
    for (Fiber &f : e.fibers) init_fiber(f);
    std::fill(e.smem.begin(), e.smem.begin() + e.smem_bytes, 0xFF);  // NaN in every float type
    e.epoch = 0;
    e.words.assign(e.smem_bytes / 4 + 1, RaceWord{});
    e.collective_arrived.assign((e.fibers.size() + 31) / 32, 0);
    std::vector<size_t> perm(e.fibers.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    for (;;) {
        if (order == 1) std::reverse(perm.begin(), perm.end());
        if (order == 2) std::shuffle(perm.begin(), perm.end(), rng);
        // serial (3): the first warp with a thread ready runs alone until every thread of it waits at a block
        // barrier or has returned -- the most skew between warps: a warp reading what another writes between
        // the same two __syncthreads (plain stores too, which the race check does not see) reads it stale
        int only_warp = -1;
        if (order == 3)
            for (const Fiber &f : e.fibers)
                if (f.state == State::Ready) {
                    only_warp = f.warp;
                    break;
                }
        bool ran = false;
        for (size_t i : perm) {
            Fiber &f = e.fibers[i];
            if (f.state != State::Ready || (only_warp >= 0 && f.warp != only_warp)) continue;
            resume(f);
            ran = true;
        }
        if (e.failed) return false;  // (a race)
        bool released = false;
        if (!release_barriers(released)) return false;
        bool all_done = true;
        for (const Fiber &f : e.fibers) all_done &= f.state == State::Done;
        if (all_done) break;
        if (!ran && !released) {
            std::string msg = "deadlock: no thread can proceed;";
            for (const Fiber &f : e.fibers) {
                if (f.state == State::Done) continue;
                msg += " thread " + std::to_string(f.ts.linear) + " waits at " + where(f) +
                       (f.state == State::WaitWarp ? " (warp)" : " (block)") + ";";
                if (msg.size() > 400) break;
            }
            fail(msg);
            return false;
        }
    }
    for (size_t i = 0; i < kSmemGuard; ++i) {
        if (e.smem[e.smem_bytes + i] != kGuardByte) {
            fail("dynamic shared memory written past its " + std::to_string(e.smem_bytes) + " bytes");
            return false;
        }
    }
    return true;
}

// Demangled name of a kernel, for failure messages.
std::string kernel_name(const void *kernel) {
    Dl_info info;
    if (dladdr(kernel, &info) == 0 || info.dli_sname == nullptr) return "kernel";
    int status = 0;
    char *name = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string out = status == 0 && name ? name : info.dli_sname;
    std::free(name);
    return out;
}

// WAVEPE_EMU_KERNEL_LOG=FILE: every kernel instance launched appended to FILE (each once while the variable names that
// file), a line each: its offset in this library, in hex -- the kernels are local symbols, which dladdr does not name;
// `nm -C` of the library does (tests/cuda_emu.py, launched_kernels) --, so that one can tell which instances, template
// arguments and all, a test or a set of tests runs (docs/DEVELOPING.md, "Where the test time goes").
void log_kernel(Emu &e, const void *kernel) {
    const char *path = std::getenv("WAVEPE_EMU_KERNEL_LOG");
    Dl_info info;
    if (path == nullptr || *path == '\0') return;
    if (e.named_in != path) {
        e.named.clear();
        e.named_in = path;
    }
    if (!e.named.insert(kernel).second || dladdr(kernel, &info) == 0) return;
    if (FILE *f = std::fopen(path, "a")) {
        std::fprintf(f, "%zx\n", size_t(static_cast<const char *>(kernel) - static_cast<const char *>(info.dli_fbase)));
        std::fclose(f);
    }
}

void wait_here(State s, const char *file, int line) {
    Emu &e = emu();
    e.cur->state = s;
    e.cur->file = file;
    e.cur->line = line;
    yield_to_scheduler();
}

}  // namespace

ThreadState &self() { return emu().cur->ts; }
const uint3 &block_idx() { return emu().block_idx; }
const dim3 &block_dim() { return emu().block_dim; }
const dim3 &grid_dim() { return emu().grid_dim; }
unsigned char *dynamic_smem() { return emu().smem.data(); }
int lane_id() { return emu().cur->lane; }
unsigned char *warp_slot(int lane) {
    Emu &e = emu();
    return e.slots.data() + (size_t(e.cur->warp) * 32 + size_t(lane)) * kSlotBytes;
}
void syncthreads(const char *file, int line) { wait_here(State::WaitBlock, file, line); }
void syncwarp(const char *file, int line) { wait_here(State::WaitWarp, file, line); }

// One barrier for a warp's exchange: each lane has filled its slot (its operands, or pointers to them and to
// its results) before calling; the last lane to arrive checks that the others wait at the same line, runs
// `all_lanes` once on the warp's slots -- every lane's results written through its pointers, while the other
// lanes are suspended here -- and lets them go on.  A shuffle, an ldmatrix or an mma so costs a warp one
// suspension a lane, not two (filling the slots, then keeping them until every lane has read them): the fibers'
// switches were ~30 % of the emulator's time.
void warp_collective(const char *file, int line, void (*all_lanes)(unsigned char *slots, int lanes)) {
    Emu &e = emu();
    Fiber &f = *e.cur;
    const size_t lo = size_t(f.warp) * 32, hi = std::min(e.fibers.size(), lo + 32);
    int &arrived = e.collective_arrived[size_t(f.warp)];
    if (size_t(++arrived) < hi - lo) {
        wait_here(State::WaitWarp, file, line);  // released by the warp's last lane (or failed by the scheduler)
        return;
    }
    arrived = 0;
    for (size_t i = lo; i < hi; ++i) {
        const Fiber &o = e.fibers[i];
        if (&o != &f && (o.line != line || (o.file != file && std::strcmp(o.file, file) != 0))) {
            fail("lanes of warp " + std::to_string(f.warp) + " wait at different warp barriers: " + where(o) + " and " +
                 file + ":" + std::to_string(line));
            wait_here(State::WaitWarp, file, line);  // the scheduler ends the block after this round
            return;
        }
    }
    all_lanes(e.slots.data() + lo * kSlotBytes, int(hi - lo));
    for (size_t i = lo; i < hi; ++i)
        if (&e.fibers[i] != &f) e.fibers[i].state = State::Ready;
}

// The worst bank-conflict degree of the ldmatrix instructions since the last reset (see below).
static std::atomic<int> g_ldmatrix_worst{1};
// the warps' mma.sync instructions and the bytes cp.async wrote into shared memory since the tests last asked
// (wavepe_emu_mma_count, wavepe_emu_cp_async_bytes: the model's counts)
static std::atomic<long long> g_mma_count{0}, g_cp_async_bytes{0};

// ---- the shared-memory race check ---------------------------------------------------------
// Between two warps, a cp.async into shared memory and an ldmatrix of the same bytes must be ordered by
// a __syncthreads: a copy lands when its thread retires it (cp.async.wait_group) and is visible to the
// other warps after the next block barrier; its bytes may be written any time between its issue and its
// retirement.  So: a copy may not be issued into words another warp read since the last barrier, nor
// into words another warp's copy is filling; an ldmatrix may not read words a copy is filling, nor words
// another warp's copy landed in since the last barrier.  A breach fails the launch, naming both sides.
// (Plain shared-memory stores and loads are not seen: the check covers the cp.async tiles and their
// ldmatrix fragments, where double buffering and the barriers between them live.)
namespace {
template <class F>
void each_word(const void *p, int bytes, F f) {
    Emu &e = emu();
    const unsigned char *base = e.smem.data(), *c = static_cast<const unsigned char *>(p);
    if (c < base || c + bytes > base + e.smem_bytes) return;  // not dynamic shared memory
    for (size_t w = size_t(c - base) / 4, end = (size_t(c - base) + bytes + 3) / 4; w < end; ++w) f(e.words[w], w);
}

void race(const std::string &what, size_t word) {
    Fiber &f = *emu().cur;
    fail("shared-memory race: " + what + " (byte " + std::to_string(4 * word) + ", warp " + std::to_string(f.warp) +
         " at " + where(f) + ", barrier epoch " + std::to_string(emu().epoch) + ")");
}
}  // namespace

namespace {
struct LdmatrixSlot {
    uint32_t *regs;
    const unsigned char *row;
    int nmat, trans;
};

// The bank-conflict degree of ldmatrix's matrix i, rows anywhere: the most distinct 4-byte words that fall in one
// of the 32 banks (offsets from the dynamic shared base).
template <class RowOf>
int bank_degree(RowOf row_of, int i, const unsigned char *base) {
    std::ptrdiff_t words[32];
    int n = 0;
    for (int r = 0; r < 8; ++r)
        for (int w = 0; w < 4; ++w) words[n++] = (row_of(8 * i + r) - base) / 4 + w;
    std::sort(words, words + n);
    n = int(std::unique(words, words + n) - words);
    int per_bank[32] = {0}, worst = 1;
    for (int a = 0; a < n; ++a) {
        const int bank = int(((words[a] % 32) + 32) % 32);
        worst = ++per_bank[bank] > worst ? per_bank[bank] : worst;
    }
    return worst;
}

// ldmatrix for the whole warp (warp_collective): the race check and the bank-conflict count of its rows, then
// every lane's registers.
void ldmatrix_all_lanes(unsigned char *slots, int lanes) {
    if (lanes != 32) return fail("ldmatrix in a warp of " + std::to_string(lanes) + " threads (it needs all 32)");
    LdmatrixSlot lane_slot[32];
    for (int l = 0; l < 32; ++l) std::memcpy(&lane_slot[l], slots + size_t(l) * kSlotBytes, sizeof(LdmatrixSlot));
    const int nmat = lane_slot[0].nmat;
    const bool trans = lane_slot[0].trans != 0;
    auto row_of = [&](int src_lane) { return lane_slot[src_lane].row; };
    const int warp = emu().cur->warp, epoch = emu().epoch;
    for (int r = 0; r < 8 * nmat; ++r)
        each_word(row_of(r), 16, [&](RaceWord &w, size_t i) {
            if (w.inflight_warp >= 0)
                race("ldmatrix of words a cp.async (warp " + std::to_string(w.inflight_warp) + ") is filling", i);
            else if (w.w_epoch == epoch && w.w_warp != warp)
                race("ldmatrix of words warp " + std::to_string(w.w_warp) +
                     "'s cp.async landed in since the last __syncthreads", i);
            if (w.r_epoch != epoch) {
                w.r_epoch = epoch;
                w.r_warps = 0;
            }
            w.r_warps |= 1u << warp;
        });
    // each 8x8 matrix is one shared-memory wavefront: 8 rows of 16 bytes; its degree is the most
    // distinct 4-byte words that fall in one of the 32 banks (offsets from the dynamic shared base)
    const unsigned char *base = dynamic_smem();
    for (int i = 0; i < nmat; ++i) {
        // rows 16-byte aligned (as the PTX requires), each row's 4 words fill one of the 8 groups of 4 banks, and two
        // rows share words only when they are one row: the degree is the most distinct rows in one group
        int quad_rows[8] = {0}, worst = 1;
        bool aligned = true;
        for (int r = 0; r < 8 && aligned; ++r) {
            const std::ptrdiff_t off = row_of(8 * i + r) - base;
            aligned = off >= 0 && off % 16 == 0;
            bool repeat = false;
            for (int p = 0; p < r && !repeat; ++p) repeat = row_of(8 * i + p) == row_of(8 * i + r);
            if (aligned && !repeat) worst = std::max(worst, ++quad_rows[(off / 16) % 8]);
        }
        if (!aligned) worst = bank_degree(row_of, i, base);
        int seen = g_ldmatrix_worst.load();
        while (worst > seen && !g_ldmatrix_worst.compare_exchange_weak(seen, worst)) {
        }
    }
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < nmat; ++i) {
            uint16_t e[2];
            for (int h = 0; h < 2; ++h) {
                const unsigned char *row = trans ? row_of(8 * i + 2 * (lane % 4) + h) : row_of(8 * i + lane / 4);
                const int col = trans ? lane / 4 : 2 * (lane % 4) + h;
                std::memcpy(&e[h], row + 2 * col, 2);
            }
            lane_slot[lane].regs[i] = uint32_t(e[0]) | (uint32_t(e[1]) << 16);
        }
}

struct MmaSlot {
    float *d;
    const uint32_t *a, *b;
    int is_bf16;
};

// fp16 inputs as floats through a table of all 65,536 (built once by __half2float: the same values; its branches per
// element were most of an mma's time); bf16 ones by __bfloat162float, a shift.
const float *fp16_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t u = 0; u < 65536; ++u) t[u] = __half2float(__ushort_as_half(uint16_t(u)));
        return t;
    }();
    return table.data();
}

// mma.sync m16n8k16 for the whole warp (warp_collective): A (16 x 16) and B (16 x 8) gathered from the lanes'
// fragments, D += A B with each element's 16 products added in k's order (as each lane did before: the same
// bits), D scattered back.
template <bool BF16>
void mma_warp(const MmaSlot *lane_slot) {
    const float *fp16 = BF16 ? nullptr : fp16_table();
    auto to_float = [&](uint32_t word, int hi) {
        const uint16_t bits = uint16_t(hi ? word >> 16 : word & 0xffffu);
        return BF16 ? __bfloat162float(__ushort_as_bfloat16(bits)) : fp16[bits];
    };
    float A[16][16], B[16][8], D[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const MmaSlot &s = lane_slot[lane];
        const int g = lane >> 2, t = lane & 3;
        for (int reg = 0; reg < 4; ++reg)  // A's register reg: row g + 8 (reg % 2), columns 2t + 8 (reg / 2) + {0, 1}
            for (int hi = 0; hi < 2; ++hi) A[g + 8 * (reg % 2)][2 * t + 8 * (reg / 2) + hi] = to_float(s.a[reg], hi);
        for (int reg = 0; reg < 2; ++reg)  // B's register reg: rows 2t + 8 reg + {0, 1}, column g
            for (int hi = 0; hi < 2; ++hi) B[2 * t + 8 * reg + hi][g] = to_float(s.b[reg], hi);
        for (int i = 0; i < 4; ++i) D[g + 8 * (i / 2)][2 * t + (i % 2)] = s.d[i];  // row g + 8 (i / 2), column 2t + i % 2
    }
    // a row's 8 sums in two 4-float vectors, kept in registers across k (as float arrays GCC kept them in memory:
    // each step waited on the last one's store); each element still adds its products one by one in k's order
    typedef float f4 __attribute__((vector_size(16)));
    f4 b_lo[16], b_hi[16];
    for (int k = 0; k < 16; ++k) {
        std::memcpy(&b_lo[k], &B[k][0], sizeof(f4));
        std::memcpy(&b_hi[k], &B[k][4], sizeof(f4));
    }
    for (int row = 0; row < 16; ++row) {
        f4 lo, hi;
        std::memcpy(&lo, &D[row][0], sizeof(f4));
        std::memcpy(&hi, &D[row][4], sizeof(f4));
        for (int k = 0; k < 16; ++k) {
            const float a = A[row][k];
            lo += a * b_lo[k];
            hi += a * b_hi[k];
        }
        std::memcpy(&D[row][0], &lo, sizeof(f4));
        std::memcpy(&D[row][4], &hi, sizeof(f4));
    }
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; ++i) lane_slot[lane].d[i] = D[g + 8 * (i / 2)][2 * t + (i % 2)];
    }
}

void mma_all_lanes(unsigned char *slots, int lanes) {
    if (lanes != 32) return fail("mma.sync in a warp of " + std::to_string(lanes) + " threads (it needs all 32)");
    MmaSlot lane_slot[32];
    for (int l = 0; l < 32; ++l) std::memcpy(&lane_slot[l], slots + size_t(l) * kSlotBytes, sizeof(MmaSlot));
    if (lane_slot[0].is_bf16 != 0)
        mma_warp<true>(lane_slot);
    else
        mma_warp<false>(lane_slot);
}
}  // namespace

void ldmatrix(uint32_t *regs, int nmat, bool trans, const void *row_addr) {
    const LdmatrixSlot mine{regs, static_cast<const unsigned char *>(row_addr), nmat, trans ? 1 : 0};
    static_assert(sizeof(mine) <= kSlotBytes, "a lane's ldmatrix fits its slot");
    std::memcpy(warp_slot(lane_id()), &mine, sizeof(mine));
    warp_collective(__FILE__, __LINE__, ldmatrix_all_lanes);
}

void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], bool is_bf16) {
    if (lane_id() == 0) g_mma_count.fetch_add(1, std::memory_order_relaxed);  // (one instruction a warp)
    const MmaSlot mine{d, a, b, is_bf16 ? 1 : 0};
    static_assert(sizeof(mine) <= kSlotBytes, "a lane's mma operands fit its slot");
    std::memcpy(warp_slot(lane_id()), &mine, sizeof(mine));
    warp_collective(__FILE__, __LINE__, mma_all_lanes);
}

void cp_async(void *smem_dst, const void *gmem_src, int src_bytes, int total_bytes) {
    Fiber &f = *emu().cur;
    const int epoch = emu().epoch;
    each_word(smem_dst, total_bytes, [&](RaceWord &w, size_t i) {
        if (w.r_epoch == epoch && (w.r_warps & ~(1u << f.warp)) != 0)
            race("cp.async into words another warp read by ldmatrix since the last __syncthreads", i);
        else if (w.inflight_warp >= 0 && w.inflight_warp != f.warp)
            race("cp.async into words another warp's cp.async is filling", i);
        w.inflight_warp = f.warp;
    });
    f.copies.push_back(PendingCopy{smem_dst, gmem_src, src_bytes, total_bytes, f.open_group});
    g_cp_async_bytes.fetch_add(total_bytes, std::memory_order_relaxed);
}

void cp_async_commit() { ++emu().cur->open_group; }

void cp_async_wait(int newest_groups_left) {
    Fiber &f = *emu().cur;
    // committed groups are 0 .. open_group - 1; retire all but the newest N of them
    const long retire_below = f.open_group - newest_groups_left;
    std::vector<PendingCopy> keep;
    for (const PendingCopy &c : f.copies) {
        if (c.group < retire_below) {
            std::memcpy(c.dst, c.src, size_t(c.src_bytes));
            std::memset(static_cast<unsigned char *>(c.dst) + c.src_bytes, 0, size_t(c.total_bytes - c.src_bytes));
            each_word(c.dst, c.total_bytes, [&](RaceWord &w, size_t) {
                w.inflight_warp = -1;
                w.w_warp = f.warp;
                w.w_epoch = emu().epoch;
            });
        } else {
            keep.push_back(c);
        }
    }
    f.copies.swap(keep);
}

cudaError_t set_max_dynamic_smem(const void *kernel, int bytes) {
    if (bytes < 0 || bytes > env_int("WAVEPE_EMU_SMEM_OPTIN", 166912)) return cudaErrorInvalidValue;
    Emu &e = emu();
    std::lock_guard<std::mutex> lock(e.mutex);
    e.max_dyn_smem[kernel] = bytes;
    return cudaSuccess;
}

cudaError_t launch(const void *kernel, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    Emu &e = emu();
    std::lock_guard<std::mutex> lock(e.mutex);
    e.failed = false;
    e.message.clear();
    const uint64_t nthreads = uint64_t(block.x) * block.y * block.z;
    auto bad_config = [&](const std::string &why) {
        e.message = "invalid launch configuration of " + kernel_name(kernel) + ": " + why;
        t_message = e.message;
        e.last_error = cudaErrorInvalidConfiguration;
        return e.last_error;
    };
    if (nthreads == 0 || nthreads > 1024) return bad_config("block of " + std::to_string(nthreads) + " threads");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        return bad_config("grid " + std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" +
                          std::to_string(grid.z));
    auto it = e.max_dyn_smem.find(kernel);
    const size_t allowed = it == e.max_dyn_smem.end() ? 48 * 1024 : size_t(it->second);
    if (smem > allowed)
        return bad_config(std::to_string(smem) + " bytes of dynamic shared memory, the kernel allows " +
                          std::to_string(allowed) + " (cudaFuncSetAttribute)");

    e.launches += std::to_string(smem) + "\n";
    log_kernel(e, kernel);
    e.fibers.resize(nthreads);
    e.slots.assign(((nthreads + 31) / 32) * 32 * kSlotBytes, 0);
    e.smem_bytes = smem;
    e.smem.assign(smem + kSmemGuard, kGuardByte);
    e.body = &body;
    e.block_dim = block;
    e.grid_dim = grid;
    for (unsigned z = 0, i = 0; z < block.z; ++z)
        for (unsigned y = 0; y < block.y; ++y)
            for (unsigned x = 0; x < block.x; ++x, ++i) {
                Fiber &f = e.fibers[i];
                f.ts.tid = uint3{x, y, z};
                f.ts.linear = int(i);
                f.warp = int(i / 32);
                f.lane = int(i % 32);
            }
    const char *order_env = std::getenv("WAVEPE_EMU_ORDER");
    const std::string order_name = order_env ? order_env : "";
    const int order = order_name == "reverse" ? 1 : order_name == "random" ? 2 : order_name == "serial" ? 3 : 0;
    std::mt19937 rng(unsigned(env_int("WAVEPE_EMU_SEED", 12345)));
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                e.block_idx = uint3{bx, by, bz};
                if (!run_block(rng, order)) {
                    e.message += " (block " + std::to_string(bx) + "," + std::to_string(by) + "," +
                                 std::to_string(bz) + " of " + kernel_name(kernel) + ")";
                    t_message = e.message;
                    e.last_error = cudaErrorLaunchFailure;
                    return e.last_error;
                }
            }
    return cudaSuccess;
}

}  // namespace wavepe_emu

// ---- runtime API -----------------------------------------------------------------
cudaError_t wavepe_emu::func_attributes(cudaFuncAttributes *attr) {
    if (env_int("WAVEPE_EMU_NO_IMAGE", 0) != 0) return cudaErrorNoKernelImageForDevice;
    *attr = cudaFuncAttributes{1024, 0};
    return cudaSuccess;
}
cudaError_t cudaGetLastError() {
    auto &e = wavepe_emu::emu();
    cudaError_t err = e.last_error;
    e.last_error = cudaSuccess;
    return err;
}
cudaError_t cudaPeekAtLastError() { return wavepe_emu::emu().last_error; }
cudaError_t cudaGetDevice(int *device) {
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int) {
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = wavepe_emu::env_int("WAVEPE_EMU_SMS", 4); return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *value = wavepe_emu::env_int("WAVEPE_EMU_SMEM_OPTIN", 166912);
        return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:  // an A100's 164 KiB by default, as the opt-in's 163
        *value = wavepe_emu::env_int("WAVEPE_EMU_SMEM_PER_SM", 167936);
        return cudaSuccess;
    case cudaDevAttrReservedSharedMemoryPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:  // an A100's 8.0 by default
        *value = wavepe_emu::env_int("WAVEPE_EMU_CC_MAJOR", 8);
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = wavepe_emu::env_int("WAVEPE_EMU_CC_MINOR", 0); return cudaSuccess;
    }
    return cudaErrorInvalidValue;
}
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t) {
    if (count) std::memset(ptr, value, count);
    return cudaSuccess;
}
extern "C" const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    }
    return "unknown error";
}
// For the tests: the worst bank-conflict degree of any ldmatrix since the last call (1: none), and reset.
extern "C" __attribute__((visibility("default"))) int wavepe_emu_ldmatrix_bank_conflicts() {
    return wavepe_emu::g_ldmatrix_worst.exchange(1);
}
// For the tests: the warp-level m16n8k16 products (HMMA) since the last call, and reset.
extern "C" __attribute__((visibility("default"))) long long wavepe_emu_mma_count() {
    return wavepe_emu::g_mma_count.exchange(0);
}
// For the tests: the bytes cp.async wrote into shared memory (zero-filled ones too) since the last call, and reset.
extern "C" __attribute__((visibility("default"))) long long wavepe_emu_cp_async_bytes() {
    return wavepe_emu::g_cp_async_bytes.exchange(0);
}
// For the tests: the launches since the last call, a line each: its dynamic shared memory (bytes).
extern "C" __attribute__((visibility("default"))) const char *wavepe_emu_launch_log() {
    static thread_local std::string log;
    auto &e = wavepe_emu::emu();
    std::lock_guard<std::mutex> lock(e.mutex);
    log.swap(e.launches);
    e.launches.clear();
    return log.c_str();
}
// For the tests: the emulator's explanation of its last failure ("" if none).
extern "C" __attribute__((visibility("default"))) const char *wavepe_emu_last_message() {
    return wavepe_emu::t_message.c_str();
}
