"""Build the small local tokenizer every peer benchmark tool is pointed at.

Why: the peers (AIPerf, guidellm, inference-perf, genai-perf) all count tokens with a
Hugging Face tokenizer, and would download one from a model hub if not given a local
directory; nothing may be downloaded here. The pacer's token is the word " tok", so the
tokenizer is a WordLevel model with a whitespace-only pre-tokenizer: every whitespace-separated
word is exactly one token (a known word or [UNK]), the same count the pacer reports as
prompt tokens (``len(text.split())``) and " tok" * n is n tokens.

The vocabulary is the words of text files already on this machine (Debian's license texts
and the corpora the peers ship in their own virtual environments), read at build time, so
synthetic prompts decode to real words rather than [UNK]. Runs inside any peer venv (they
all have ``tokenizers``); peers.py calls it there:

    <venv>/bin/python benchmarks/peer_tokenizer.py OUT_DIR [CORPUS ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIALS = ["[UNK]", "<s>", "</s>", "<pad>"]
TOKEN = "tok"
DEFAULT_CORPORA = ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"]
MAX_WORDS = 30000


def vocabulary(corpora: list[Path]) -> list[str]:
    seen = dict.fromkeys(SPECIALS + [TOKEN])
    for path in corpora:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for word in text.split():
            if len(seen) >= MAX_WORDS:
                break
            seen.setdefault(word)
    return list(seen)


def build(out: Path, corpora: list[Path]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = vocabulary(corpora)
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # decode joins words with single spaces (what WordPiece's decoder does without "##")
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    # [UNK] is deliberately not declared special: decode(skip_special_tokens=True) must not
    # drop words, or a prompt's token count would change on a decode/encode round trip
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20,
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
        "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False,
    }, indent=1))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}, indent=1))
    (out / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "vocab_size": len(vocab), "max_position_embeddings": 1 << 20,
        "bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"],
        "pad_token_id": vocab["<pad>"],
    }, indent=1))
    return out


def check(out: Path) -> dict:
    """Load the directory the way the peers do and verify the one-word-one-token rule."""
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(str(out))
    facts = {
        "class": type(t).__name__, "vocab": len(t),
        "tok_x8": len(t.encode(" tok" * 8, add_special_tokens=False)),
        "sentence": len(t.encode("Request 000123 the quick zebra-unknown word", add_special_tokens=False)),
        "roundtrip": t.decode(t.encode("the tok tok zzqx", add_special_tokens=False)),
    }
    assert facts["tok_x8"] == 8 and facts["sentence"] == 6, facts
    return facts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="directory to write tokenizer files into")
    ap.add_argument("corpora", type=Path, nargs="*", help="text files for the vocabulary")
    ap.add_argument("--no-check", action="store_true", help="skip the transformers load check")
    args = ap.parse_args(argv)
    build(args.out, [Path(p) for p in DEFAULT_CORPORA] + args.corpora)
    if not args.no_check:
        print(json.dumps(check(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
