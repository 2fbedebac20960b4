def test_known_ids_for_the_capital_prompt_have_no_bos(smollm2):
    # ids from Hugging Face's SmolLM2 tokenizer (also checked against the oracle export)
    assert smollm2.tokenizer.encode("The capital of France is") == [504, 3575, 282, 4649, 314]


def test_digits_are_split_one_per_token(smollm2):
    tk = smollm2.tokenizer
    ids = tk.encode("2024")
    assert len(ids) == 4 and [tk.decode([i]) for i in ids] == ["2", "0", "2", "4"]


def test_control_tokens_are_matched_whole(smollm2):
    tk = smollm2.tokenizer
    ids = tk.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert tk.decode(ids) == "<|im_start|>user\nhi<|im_end|>"


def test_decode_inverts_encode_on_unicode_and_whitespace(smollm2):
    tk = smollm2.tokenizer
    for text in ["def add(a, b):\n    return", "naïve café — 東京", "  two  spaces\t\ttabs"]:
        assert tk.decode(tk.encode(text)) == text
