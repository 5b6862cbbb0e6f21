"""The cffi builder (API mode) of the native gate engine: ``native/gate_engine.c`` compiled into
the extension module ``verbspec.native._gate_engine``. setup.py runs it from the project root,
where the paths below are relative to; ``builder`` makes the same module with other flags (the
sanitized and mutant builds of the tests)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cffi import FFI

MODULE = "verbspec.native._gate_engine"
HERE = Path(__file__).resolve().parent
FLAGS = ("-std=c11", "-O2")

# The ABI of native/gate_engine.h, as cffi reads it (it takes no preprocessor conditionals).
CDEF = """
typedef enum {
    VS_GATE_INIT, VS_GATE_IDLE, VS_GATE_HOLD, VS_GATE_ARM_POST, VS_GATE_ARM_BAR_SEND,
    VS_GATE_ARM_BAR_READ, VS_GATE_SEND, VS_GATE_WAIT, VS_GATE_DRAIN_POST, VS_GATE_DRAIN_WAIT,
    VS_GATE_BIG_HDR_SEND, VS_GATE_BIG_HDR_READ, VS_GATE_BIG_BEGIN, VS_GATE_BIG_POST,
    VS_GATE_BIG_BAR_SEND, VS_GATE_BIG_BAR_READ, VS_GATE_BIG_XFER, VS_GATE_FAILED,
    VS_GATE_CRASHED, VS_GATE_N_PHASES
} vs_gate_phase;
typedef enum {
    VS_GATE_STEP_SETUP, VS_GATE_STEP_CALL, VS_GATE_STEP_ADVANCE, VS_GATE_STEP_READ,
    VS_GATE_STEP_POLL, VS_GATE_STEP_DEAD
} vs_gate_step;
typedef enum {
    VS_GATE_BUF_IN, VS_GATE_BUF_OUT, VS_GATE_BUF_STAGE, VS_GATE_BUF_NONE, VS_GATE_N_BUFS
} vs_gate_buf;

#define VS_GATE_OK ...
#define VS_GATE_REFUSED ...
#define VS_GATE_TCP_BYTE ...
#define VS_GATE_TCP_HEADER ...
#define VS_GATE_OP_SEND ...
#define VS_GATE_OP_RECV ...
#define VS_GATE_TEXT ...

typedef struct {
    uint64_t vec_bytes, max_msg, window, gates_per_token, n_slots, slot_start, slot_step,
             slot_mask, rq_depth, sq_depth, big_depth, chain_max, staging_bytes;
} vs_gate_config;
typedef struct {
    uint64_t wr_id; uint64_t offset; uint64_t length; int32_t buf; int32_t signaled;
} vs_gate_wr;
typedef struct {
    int32_t kind; uint64_t value; uint64_t chunks; uint64_t depth;
} vs_gate_tcp;
typedef struct {
    int32_t opcode; int32_t status; uint64_t wr_id; uint64_t byte_len;
} vs_gate_completion;
typedef struct {
    const vs_gate_wr *recvs; size_t n_recvs;
    const vs_gate_wr *sends; size_t n_sends;
    vs_gate_tcp tcp_out[1]; size_t n_tcp;
    char result[256];
    char log[1][256]; size_t n_log;
} vs_gate_emitted;
typedef struct {
    int32_t phase; uint64_t recv_done; uint64_t last_gate_seq; int32_t window_active;
    int64_t send_outstanding; const char *error;
} vs_gate_view;
typedef struct vs_gate vs_gate;

int vs_gate_create(const vs_gate_config *cfg, uint64_t grant, vs_gate **out, char *err,
                   size_t err_len);
vs_gate *vs_gate_clone(const vs_gate *e);
void vs_gate_destroy(vs_gate *e);
int vs_gate_setup(vs_gate *e);
int vs_gate_call_gate(vs_gate *e, uint64_t layer, uint64_t gate, uint64_t seq);
int vs_gate_call_big(vs_gate *e, uint64_t chunks);
int vs_gate_consume(vs_gate *e);
int vs_gate_advance(vs_gate *e);
int vs_gate_tcp_read(vs_gate *e, const vs_gate_tcp *item);
int vs_gate_poll_size(vs_gate *e, uint32_t *size);
int vs_gate_completions(vs_gate *e, const vs_gate_completion *polled, size_t n);
int vs_gate_timeout(vs_gate *e);
int vs_gate_peer_closed(vs_gate *e);
int vs_gate_crash(vs_gate *e);
const vs_gate_emitted *vs_gate_out(const vs_gate *e);
void vs_gate_get_view(const vs_gate *e, vs_gate_view *view);
int32_t vs_gate_phase_of(const vs_gate *e);
vs_gate_step vs_gate_next_step(const vs_gate *e);
uint64_t vs_gate_recv_done(const vs_gate *e);
uint64_t vs_gate_last_gate_seq(const vs_gate *e);
int32_t vs_gate_window_active(const vs_gate *e);
int64_t vs_gate_send_outstanding(const vs_gate *e);
const char *vs_gate_error(const vs_gate *e);
const char *vs_gate_refusal(const vs_gate *e);
const char *vs_gate_phase_name(int32_t phase);
"""


def builder(module: str = MODULE, flags: Sequence[str] = FLAGS, *,
            absolute: bool = False) -> FFI:
    """A builder of the engine as extension ``module`` compiled with ``flags`` (and linked with
    them); with ``absolute``, the sources are named by absolute path (a build elsewhere)."""
    root = HERE if absolute else Path("native")
    ffi = FFI()
    ffi.cdef(CDEF)
    ffi.set_source(module, '#include "gate_engine.h"',
                   sources=[(root / "gate_engine.c").as_posix()],
                   include_dirs=[root.as_posix()], extra_compile_args=list(flags),
                   extra_link_args=[f for f in flags if f.startswith("-fsanitize")])
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
