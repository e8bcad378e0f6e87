"""Loading tokenizers in every form the CLI takes."""

import os
import shutil

from tagjit import fingerprint, load_tokenizer_info

from shared_data import TOKENIZERS, mistral_tokenizer_model


def test_tiktoken_ranks_file_with_llama3_specials(llama3_info):
    assert llama3_info.vocab_size == 128256
    assert 128009 in llama3_info.stop_token_ids


def test_vocab_json_and_merges_directory(qwen2_info):
    assert qwen2_info.vocab_size >= 151643
    assert qwen2_info.stop_token_ids


def test_byte_level_bpe_without_tokenizer_config(tmp_path):
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(TOKENIZERS / "qwen2" / f, tmp_path / f)
    info = load_tokenizer_info(str(tmp_path))
    assert info.vocab_size == 151643


def test_sentencepiece_model_file(tmp_path):
    path = tmp_path / "tokenizer.model"
    shutil.copy(mistral_tokenizer_model(), path)
    info = load_tokenizer_info(str(path))
    assert info.vocab_size == 32000 and info.stop_token_ids == [2]


def test_directory_holding_only_tokenizer_model(tmp_path):
    shutil.copy(mistral_tokenizer_model(), tmp_path / "tokenizer.model")
    assert load_tokenizer_info(str(tmp_path)).vocab_size == 32000


def test_fingerprints_differ_between_vocabularies(llama3_info, qwen2_info):
    assert fingerprint(llama3_info) != fingerprint(qwen2_info)
    assert fingerprint(llama3_info) == fingerprint(load_tokenizer_info(str(TOKENIZERS / "llama3" / "tokenizer.model")))


def test_missing_path_is_an_error():
    import pytest

    with pytest.raises(FileNotFoundError):
        load_tokenizer_info(os.path.join(str(TOKENIZERS), "no-such-tokenizer"))


def test_a_per_tokenizer_table_is_built_once_for_concurrent_callers(llama3_info):
    import threading

    from tagjit.runtime.vocab import per_tokenizer

    builds: list[int] = []
    gate = threading.Barrier(4)

    def build(info):
        builds.append(1)
        return object()

    results: list[object] = []

    def ask():
        gate.wait()
        results.append(per_tokenizer(llama3_info, "test.once", build))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len({id(r) for r in results}) == 1


def test_tagjit_uses_no_private_xgrammar_attribute():
    import pathlib
    import re

    src = pathlib.Path(__file__).parents[1] / "src" / "tagjit"
    private = [f"{p.name}: {m.group(0)}" for p in src.rglob("*.py")
               for m in re.finditer(r"\b(?:xgr|info|tokenizer_info|matcher|compiled)\._[a-z]\w*", p.read_text())]
    assert not private
