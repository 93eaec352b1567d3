#!/usr/bin/env python3
"""Dumps every f32 intermediate of llama.cpp's graph for one batch of tokens to an .npz file.

Uses llama-cpp-python's eval callback (the same package bench/compare.py uses), plain attention
and an f32 KV cache, like the `.f32kv-nofa` reference files. Tensor names are llama.cpp's
(`attn_norm-0`, `Qcur-0`, `kqv_out-0`, ...; repeated names get `#1`, `#2`).

    python3 tools/parity/llama_trace.py MODEL.gguf OUT.npz 2,818,5279
"""
import ctypes
import sys

import llama_cpp as L
import numpy as np


class GgmlTensor(ctypes.Structure):
    """The leading fields of `struct ggml_tensor` (ggml.h), enough to read a computed tensor."""
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64)]


def read_f32(t):
    """Copies a (possibly strided) f32 tensor into a numpy array shaped [ne3, ne2, ne1, ne0]."""
    ne, nb = list(t.ne), list(t.nb)
    out = np.empty((ne[3], ne[2], ne[1], ne[0]), dtype=np.float32)
    for i3 in range(ne[3]):
        for i2 in range(ne[2]):
            for i1 in range(ne[1]):
                off = t.data + i3 * nb[3] + i2 * nb[2] + i1 * nb[1]
                if nb[0] == 4:
                    out[i3, i2, i1] = np.ctypeslib.as_array((ctypes.c_float * ne[0]).from_address(off))
                else:
                    out[i3, i2, i1] = [ctypes.c_float.from_address(off + i * nb[0]).value for i in range(ne[0])]
    return out.squeeze()


def main():
    model_path, out_path, tokens = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    dump = {}

    def observe(ptr, ask, _user):
        if ask:
            return True
        t = ctypes.cast(ptr, ctypes.POINTER(GgmlTensor)).contents
        if t.type == 0 and t.data:  # GGML_TYPE_F32
            name, key, k = t.name.decode(), t.name.decode(), 1
            while key in dump:
                key, k = f"{name}#{k}", k + 1
            dump[key] = read_f32(t)
        return True

    callback = L.ggml_backend_sched_eval_callback(observe)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(model_path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 2048, 2048, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.type_k = cp.type_v = L.GGML_TYPE_F32
    cp.cb_eval = callback
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(len(tokens), 0, 1)
    batch.n_tokens = len(tokens)
    for i, tok in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, i, 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = int(i == len(tokens) - 1)
    if L.llama_decode(ctx, batch) != 0:
        sys.exit("llama_decode failed")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    logits = L.llama_get_logits_ith(ctx, -1)
    dump["logits_last"] = np.ctypeslib.as_array(logits, shape=(n_vocab,)).copy()
    np.savez(out_path, **dump)
    print(f"{len(dump)} tensors -> {out_path}")


if __name__ == "__main__":
    main()
