"""A real OpenAI-compatible server for the live tests: llama.cpp's ``llama-server``.

No vLLM or SGLang server runs on a CPU-only machine, but llama.cpp's ``llama-server``
does, and it has what pipedeck's live backends drive: streaming ``/v1/completions``
(one SSE event per token, then ``[DONE]``), prompts given as token-id lists,
``ignore_eos``, continuous batching over ``--parallel`` slots, ``/health`` and
Prometheus ``/metrics`` (with ``--metrics``).  This module provides the two things a
test needs to start one, with no binary or model downloaded from anywhere but PyPI:

``server_binary() -> Path``
    The path of a ``llama-server`` binary, built on first use from the sources that the
    llama-cpp-python sdist on PyPI vendors under ``vendor/llama.cpp`` (the pinned
    version below, checked against its SHA-256).  Only the ``llama-server`` target is
    built: cmake, Release, static llama/ggml libraries, no web UI download
    (``LLAMA_USE_PREBUILT_UI=OFF``), no OpenSSL, and ggml's fixed x86-64 baseline (AVX2,
    FMA, F16C) instead of ``-march=native`` (``GGML_NATIVE=OFF``), so a cache shared with
    other AVX2 machines holds nothing they cannot run.  It needs ``cmake``, a C and a C++
    compiler and ``pip`` access to the package index; about 12 CPU-minutes (so about 6 on
    2 idle cores; 12.5 minutes measured on 2 shared, busy ones; a 15 MB binary), once: the
    binary is cached in ``${XDG_CACHE_HOME:-~/.cache}/pipedeck/llama-server-<version>/``
    (override the directory with ``$PIPEDECK_CACHE``) and every later call returns at
    once.  The build runs in a temporary directory beside the cache and the finished
    binary is renamed into place, so a failed or interrupted build leaves no half-written
    cache; a lock file serialises concurrent builds.  ``$PIPEDECK_LLAMA_SERVER`` names
    an existing binary to use instead.  CI (``.ci/run``) installs cmake from PyPI when
    the machine has none; the script itself only ever uses the ``cmake`` on ``PATH``.

``make_model(path) -> Path``
    Writes a tiny random-weight llama GGUF (2 layers, hidden 64, 4 heads, a 384-token
    SentencePiece-style vocabulary, 8192 context, about 0.3 MB) with the ``gguf``
    package.  Deterministic for a given seed.  The weights are arranged so that only
    the ordinary word pieces can ever be sampled: hidden dimension 0 of the residual
    stream is a constant 10 (every token embedding has it, and no layer writes to it),
    and the output-layer rows of the control tokens (``<unk>``, ``<s>``, ``</s>``) and
    of the 256 byte tokens put -100 on that dimension and nothing elsewhere, so their
    logits sit hundreds below every word piece's.  So EOS is never sampled (output
    lengths stay as asked, with or without ``ignore_eos``) and every generated token
    decodes to complete ASCII text (one SSE event per token; the server holds back
    partial UTF-8 from byte tokens).

``make_config(path) -> Path``
    Writes the tiny model's architecture as a Hugging Face ``config.json`` (llama, the
    shape above, float16), which pipedeck's ``--model`` reads as a model profile, so the
    simulator can run the model the server serves (``pipedeck calibrate`` needs both).

Command line::

    python tests/live/llama_server.py --print-path         # build if needed; print the path
    python tests/live/llama_server.py --make-model FILE    # write the tiny model to FILE
    python tests/live/llama_server.py --make-config FILE   # write its config.json to FILE

Progress goes to stderr, the answer alone to stdout; failures are one line on stderr
and exit status 1 (the build log's path is named when the build itself fails).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

#: The llama-cpp-python release whose sdist supplies the llama.cpp sources.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
#: SHA-256 of ``llama_cpp_python-0.3.36.tar.gz`` as the package index served it.
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # llama and ggml linked in: one self-contained binary
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the build downloads the web UI
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",  # no HTTPS needed on loopback; no libssl dependency
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DGGML_NATIVE=OFF",  # portable baseline, not -march=native
    "-DGGML_CCACHE=OFF",
)


class LlamaServerError(RuntimeError):
    """The binary cannot be had; the message is one line fit for a user."""


class MissingToolError(LlamaServerError):
    """cmake or a C/C++ compiler is not installed (tests skip on this one)."""


# --------------------------------------------------------------------------- binary


def cache_root() -> Path:
    """``$PIPEDECK_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/pipedeck``."""
    if os.environ.get("PIPEDECK_CACHE"):
        return Path(os.environ["PIPEDECK_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "pipedeck"


def cached_binary(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    """Where the binary built from llama-cpp-python ``version`` lives (it may not yet)."""
    return cache_root() / f"llama-server-{version}" / "llama-server"


def build_tools() -> dict[str, str]:
    """The cmake, C and C++ compiler the build will use; MissingToolError if one is absent."""
    found: dict[str, str] = {}
    wanted = {
        "cmake": ["cmake"],
        "C compiler": [os.environ.get("CC", ""), "cc", "gcc", "clang"],
        "C++ compiler": [os.environ.get("CXX", ""), "c++", "g++", "clang++"],
    }
    for what, names in wanted.items():
        path = next((p for n in names if n and (p := shutil.which(n))), None)
        if path is None:
            hint = " (pip install cmake, or your system's package)" if what == "cmake" else ""
            raise MissingToolError(f"cannot build llama-server: no {what} found on PATH{hint}")
        found[what] = path
    return found


def server_binary(version: str = LLAMA_CPP_PYTHON_VERSION, *, log: IO[str] | None = None) -> Path:
    """The absolute path of a ``llama-server`` binary, building it on first use.

    ``$PIPEDECK_LLAMA_SERVER``, when set, is returned as is (it must exist).  Otherwise the
    binary cached for ``version`` is returned, or built (progress to ``log``, stderr by
    default) and cached first.  Raises MissingToolError without cmake or a compiler and
    LlamaServerError when the download or the build fails.
    """
    override = os.environ.get("PIPEDECK_LLAMA_SERVER")
    if override:
        path = Path(override).expanduser().resolve()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise LlamaServerError(f"$PIPEDECK_LLAMA_SERVER={override} is not an executable file")
        return path
    target = cached_binary(version)
    if _usable(target):
        return target.resolve()
    log = log if log is not None else sys.stderr
    tools = build_tools()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / ".lock"):
        if _usable(target):  # another process built it while we waited for the lock
            return target.resolve()
        _build(version, target, tools, log)
    return target.resolve()


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``lock_path`` (POSIX), held for the ``with`` body."""
    import fcntl

    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(version: str, target: Path, tools: dict[str, str], log: IO[str]) -> None:
    """Download the sdist, build ``llama-server`` in a temporary directory, move it to ``target``."""
    build_log = target.parent.parent / f"llama-server-{version}.build.log"
    # Under the lock no other build of this version runs: what is left is from a killed one.
    for stale in target.parent.parent.glob(f"llama-server-{version}-build-*"):
        shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=f"llama-server-{version}-build-", dir=target.parent.parent))
    jobs = str(int(os.environ.get("PIPEDECK_BUILD_JOBS", 0)) or os.cpu_count() or 2)
    print(f"llama-server: building from llama-cpp-python {version} (once; cached as {target})", file=log, flush=True)
    print(f"llama-server: full build log in {build_log}", file=log, flush=True)
    staged = target.parent / f".llama-server.{os.getpid()}.tmp"
    try:
        with open(build_log, "w") as out:
            sdist = _download_sdist(version, work, out, log, build_log)
            source = _extract_llama_cpp(sdist, work)
            sdist.unlink()
            build_dir = work / "build"
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            env = dict(os.environ)
            env["CC"], env["CXX"] = tools["C compiler"], tools["C++ compiler"]
            _run(
                "configure",
                [tools["cmake"], "-S", str(source), "-B", str(build_dir), *generator, *CMAKE_OPTIONS],
                out,
                log,
                build_log,
                env,
            )
            _run(
                f"compile (-j{jobs})",
                [tools["cmake"], "--build", str(build_dir), "--target", "llama-server", "-j", jobs],
                out,
                log,
                build_log,
                env,
            )
        built = build_dir / "bin" / "llama-server"
        if not _usable(built):
            raise LlamaServerError(f"llama-server build finished but {built} is missing; see {build_log}")
        shutil.copy2(built, staged)
        os.replace(staged, target)  # atomic: the cache holds the whole binary or none
        print(f"llama-server: built {target}", file=log, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        staged.unlink(missing_ok=True)  # only left behind if the copy was interrupted


def _download_sdist(version: str, work: Path, out: IO[str], log: IO[str], build_log: Path) -> Path:
    """``pip download`` the llama-cpp-python sdist into ``work`` and check its SHA-256."""
    _run(
        "download sdist",
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "-d",
            str(work),
            f"llama-cpp-python=={version}",
        ],
        out,
        log,
        build_log,
    )
    sdists = list(work.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not sdists:
        raise LlamaServerError(f"pip download left no llama_cpp_python-{version}.tar.gz; see {build_log}")
    if version == LLAMA_CPP_PYTHON_VERSION:
        digest = hashlib.sha256(sdists[0].read_bytes()).hexdigest()
        if digest != SDIST_SHA256:
            raise LlamaServerError(f"llama_cpp_python-{version}.tar.gz has SHA-256 {digest}, expected {SDIST_SHA256}")
    return sdists[0]


def _extract_llama_cpp(sdist: Path, work: Path) -> Path:
    """Unpack only ``vendor/llama.cpp`` from the sdist; return its directory."""
    with tarfile.open(sdist) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
        prefix = f"{top}/vendor/llama.cpp/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise LlamaServerError(f"{sdist.name} has no vendor/llama.cpp")
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(work / "src", members=members, **kwargs)
    return work / "src" / prefix


def _run(
    step: str, cmd: list[str], out: IO[str], log: IO[str], build_log: Path, env: dict[str, str] | None = None
) -> None:
    """Run ``cmd``, its output to the build log; echo progress lines (``[n/N]``, ``[ n%]``) to ``log``."""
    print(f"llama-server: {step}", file=log, flush=True)
    print(f"$ {' '.join(cmd)}", file=out, flush=True)
    try:
        # Its own process group, so that an interruption can stop cmake, ninja and the compilers.
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise LlamaServerError(f"llama-server {step} could not start {cmd[0]}: {exc}") from None
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            out.write(line)
            if line.startswith("["):
                print(f"  {line.rstrip()}", file=log, flush=True)
        code = proc.wait()
    except BaseException:  # Ctrl-C: stop the whole step before the temporary tree goes
        _stop_group(proc)
        raise
    out.flush()
    if code != 0:
        raise LlamaServerError(f"llama-server {step} failed (exit {code}); see {build_log}")


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the step's process group, SIGKILL it after 10 s; reap ``proc``.

    SIGTERM first because ninja runs each compiler in a process group of its own and only
    stops them when it is itself told to stop; a SIGKILL would orphan them.
    """
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


# --------------------------------------------------------------------------- model

#: Shape of the tiny model (also what a test may rely on).
N_LAYER, N_EMBD, N_HEAD, N_FF, N_CTX = 2, 64, 4, 128, 8192
#: ``<unk>``, ``<s>``, ``</s>``: ids 0, 1, 2 as in Llama 2; then 256 byte tokens.
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
_WORDS = (
    "the of and to in is it that for on as with was be by at this are from or an but not "
    "have has had which you they we he she his her their one all can will more some what "
    "when who there than them into two out up so no if its about time only new also over "
    "just like"
).split()
#: The ordinary pieces, the only tokens the model ever samples: letters, "▁"+letter,
#: digits, "▁"+word (SentencePiece writes a leading space as "▁").
PIECES = (
    [chr(c) for c in range(ord("a"), ord("z") + 1)]
    + ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    + [str(d) for d in range(10)]
    + ["\u2581" + w for w in _WORDS]
)
N_VOCAB = 3 + 256 + len(PIECES)
assert N_VOCAB == 384
#: Token ids of the ordinary pieces (the ids a prompt of "real" tokens can use).
PIECE_IDS = range(3 + 256, N_VOCAB)


def make_model(path: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Write the tiny llama GGUF to ``path`` (atomically) and return its absolute path."""
    import gguf  # the `gguf` package on PyPI (the test extra); only the model needs it
    import numpy as np

    path = Path(path).expanduser().resolve()
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: no directory {path.parent}")
    rng = np.random.default_rng(seed)
    head_dim = N_EMBD // N_HEAD

    def matrix(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    # Residual dimension 0 is a constant 10: every embedding has it and no layer writes it
    # (row 0 of attn_output and ffn_down is zero; numpy rows are a matrix's outputs).
    embd = matrix(N_VOCAB, N_EMBD, 1.0)
    embd[:, 0] = 10.0
    output = matrix(N_VOCAB, N_EMBD, 0.3)
    output[:, 0] = 0.0
    banned = np.ones(N_VOCAB, dtype=bool)
    banned[PIECE_IDS.start :] = False
    output[banned, :] = 0.0
    output[banned, 0] = -100.0  # logit = -100 * (normalised dim 0, about 6) for these rows

    tensors: dict[str, np.ndarray] = {
        "token_embd.weight": embd,
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "output.weight": output,
    }
    for i in range(N_LAYER):
        attn_out = matrix(N_EMBD, N_EMBD, 0.1)
        attn_out[0, :] = 0.0
        ffn_down = matrix(N_EMBD, N_FF, 0.1)
        ffn_down[0, :] = 0.0
        tensors.update(
            {
                f"blk.{i}.attn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
                f"blk.{i}.attn_q.weight": matrix(N_EMBD, N_EMBD, 0.1),
                f"blk.{i}.attn_k.weight": matrix(N_EMBD, N_EMBD, 0.1),
                f"blk.{i}.attn_v.weight": matrix(N_EMBD, N_EMBD, 0.1),
                f"blk.{i}.attn_output.weight": attn_out,
                f"blk.{i}.ffn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
                f"blk.{i}.ffn_gate.weight": matrix(N_FF, N_EMBD, 0.1),
                f"blk.{i}.ffn_up.weight": matrix(N_FF, N_EMBD, 0.1),
                f"blk.{i}.ffn_down.weight": ffn_down,
            }
        )

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + PIECES
    types = (
        [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
        + [gguf.TokenType.BYTE] * 256
        + [gguf.TokenType.NORMAL] * len(PIECES)
    )
    # SentencePiece scores: longer pieces win merges; letters and bytes rank below words.
    scores = [0.0] * (3 + 256) + [
        -1000.0 - i if len(p.lstrip("\u2581")) <= 1 else -float(i) for i, p in enumerate(PIECES)
    ]

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    try:
        writer.add_name("pipedeck tiny random llama")
        writer.add_context_length(N_CTX)
        writer.add_embedding_length(N_EMBD)
        writer.add_block_count(N_LAYER)
        writer.add_feed_forward_length(N_FF)
        writer.add_head_count(N_HEAD)
        writer.add_head_count_kv(N_HEAD)
        writer.add_rope_dimension_count(head_dim)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_vocab_size(N_VOCAB)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_unk_token_id(UNK_ID)
        writer.add_bos_token_id(BOS_ID)
        writer.add_eos_token_id(EOS_ID)
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)
        for name, value in tensors.items():
            # Matrices in f16 (half the file), norms in f32 as llama.cpp expects.
            writer.add_tensor(name, value.astype(np.float16) if value.ndim == 2 else value)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def make_config(path: str | os.PathLike[str]) -> Path:
    """Write the tiny model's Hugging Face config.json to ``path`` and return its absolute path."""
    path = Path(path).expanduser().resolve()
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: no directory {path.parent}")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": N_LAYER,
        "hidden_size": N_EMBD,
        "num_attention_heads": N_HEAD,
        "num_key_value_heads": N_HEAD,
        "intermediate_size": N_FF,
        "vocab_size": N_VOCAB,
        "max_position_embeddings": N_CTX,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",  # make_model's matrices
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--print-path", action="store_true", help="build llama-server if it is not cached; print its absolute path"
    )
    group.add_argument("--make-model", metavar="FILE", help="write the tiny test model (GGUF) to FILE")
    group.add_argument(
        "--make-config",
        metavar="FILE",
        help="write the tiny model's Hugging Face config.json (pipedeck's --model reads it) to FILE",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of --make-model (default 0)")
    args = parser.parse_args(argv)
    # A CI job cancelled with SIGTERM cleans up like Ctrl-C: no temporary build tree left.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if args.print_path:
            print(server_binary())
        elif args.make_config:
            print(make_config(args.make_config))
        else:
            print(make_model(args.make_model, seed=args.seed))
    except LlamaServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted; nothing was cached", file=sys.stderr)
        return 130
    except (ImportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
