"""The models: GPT, Mamba, U-Net (DDPM), BERT (ember/models/)"""

from collections.abc import Sequence

import ember._ember
import ember._ember.nn


class CharTokenizer:
    def __init__(self, vocabulary: str) -> None: ...

    @staticmethod
    def from_text(text: str) -> CharTokenizer: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def vocabulary(self) -> bytes: ...

class WordPieceTokenizer:
    @staticmethod
    def from_folder(folder: str) -> WordPieceTokenizer: ...

    def tokenize(self, text: str) -> list[str]: ...

    def encode(self, text: str, max_length: int | None = None, add_special_tokens: bool = True) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str], max_length: int | None = None) -> dict: ...

    def id_to_token(self, id: int) -> str: ...

    def token_to_id(self, token: str) -> int | None: ...

    @property
    def vocab_size(self) -> int: ...

class LanguageModel(ember._ember.nn.Module):
    def loss(self, idx: ember._ember.Tensor, targets: ember._ember.Tensor) -> ember._ember.Tensor: ...

    def num_parameters(self) -> int: ...

    def generate(self, prompt: Sequence[int], tokens: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> list[int]:
        """
        Continues the token ids `prompt` (a GPT through its KV cache, Mamba through its state).
        """

class GPT(LanguageModel):
    def __init__(self, vocab_size: int = 84, block_size: int = 64, n_layer: int = 4, n_head: int = 4, n_embd: int = 128, dropout: float = 0.0, bias: bool = True) -> None: ...

    def __call__(self, idx: ember._ember.Tensor) -> ember._ember.Tensor: ...

    @property
    def config(self) -> dict: ...

class Mamba(LanguageModel):
    def __init__(self, vocab_size: int = 65, d_model: int = 128, n_layer: int = 4, d_state: int = 16, d_conv: int = 4, expand: int = 2) -> None: ...

    def __call__(self, idx: ember._ember.Tensor) -> ember._ember.Tensor: ...

    @property
    def config(self) -> dict: ...

class UNet(ember._ember.nn.Module):
    def __init__(self, channels: int = 32, multipliers: Sequence[int] = [1, 2, 2], groups: int = 8, num_classes: int = 10, image_channels: int = 1) -> None: ...

    def __call__(self, x: ember._ember.Tensor, t: ember._ember.Tensor, labels: ember._ember.Tensor) -> ember._ember.Tensor: ...

    @property
    def config(self) -> dict: ...

class Bert(ember._ember.nn.Module):
    @staticmethod
    def from_folder(folder: str) -> Bert: ...

    def __call__(self, input_ids: ember._ember.Tensor, attention_mask: ember._ember.Tensor | None = None, token_type_ids: ember._ember.Tensor | None = None) -> tuple: ...

class BpeTokenizer:
    def encode(self, text: str, parse_special: bool = True) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def pre_tokenize(self, text: str) -> list[str]: ...

    def id_to_token(self, id: int) -> str: ...

    def token_to_id(self, token: str) -> int | None: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def bos_id(self) -> int | None: ...

    @property
    def eos_id(self) -> int | None: ...

class Llama(ember._ember.nn.Module):
    @staticmethod
    def from_gguf(path: str, dequantize: bool = False) -> Llama:
        """
        A Llama-family model from a GGUF file (quantized weights stay quantized unless `dequantize`).
        """

    def __call__(self, idx: ember._ember.Tensor) -> ember._ember.Tensor: ...

    def generate(self, prompt: Sequence[int], max_tokens: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0, seed: int = 0, stop: Sequence[int] = []) -> list[int]:
        """
        Continues the token ids `prompt` by up to max_tokens ids, stopping after an id in `stop`.
        """

    @property
    def config(self) -> dict: ...

def load_tokenizer(path: str) -> BpeTokenizer:
    """
    The byte-level BPE tokenizer of a GGUF file's tokenizer.ggml.* metadata.
    """

class Chat:
    def __init__(self, path: str, system: str = '', context: int = 2048, max_tokens: int = 512, temperature: float = 0.2, top_p: float = 0.9, repetition_penalty: float = 1.1, seed: int = 0, chat_template: str = '') -> None: ...

    def reply(self, message: str) -> str:
        """Adds the message, generates the assistant's reply and returns it."""

    def reset(self) -> None: ...

    @property
    def messages(self) -> list: ...

class SentenceEncoder:
    @staticmethod
    def from_folder(folder: str) -> SentenceEncoder: ...

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> ember._ember.Tensor: ...

    @property
    def tokenizer(self) -> WordPieceTokenizer: ...

    @property
    def model(self) -> ember._ember.nn.Module: ...
