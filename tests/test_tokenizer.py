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
