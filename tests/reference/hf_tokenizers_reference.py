"""Reference for triad's Hugging Face tokenizers (io/hf_tokenizer.h): small tokenizers trained
by the `tokenizers` library itself, and the ids it gives for a test corpus.

    pip install tokenizers
    python3 tests/reference/hf_tokenizers_reference.py     (from the repository root)

Writes under tests/data/io/:
    hf_gpt2_tokenizer.json     byte-level BPE as GPT-2's: ByteLevel pre-tokenizer (GPT-2's split
                               regex), ByteLevel decoder, <|endoftext|>; 512 tokens trained on
                               english.txt and the multilingual lines below
    hf_llama3_tokenizer.json   the same merges under Llama-3's layout: a Split pre-tokenizer with
                               Llama-3's regex, then ByteLevel without its regex, ignore_merges,
                               <|begin_of_text|> put first by a TemplateProcessing post-processor,
                               and <|end_of_text|>, <|eot_id|> as special tokens
    hf_llama2_tokenizer.json   SentencePiece-style BPE as Llama-2's: normalizer Prepend("▁") +
                               Replace(" ", "▁"), no pre-tokenizer, byte fallback (<0x00>..<0xFF>
                               at ids 3..258 after <unk>, <s>, </s>), <s> put first by the
                               post-processor, decoder Replace + ByteFallback + Fuse + Strip;
                               600 tokens
    hf_llama2_metaspace_tokenizer.json   the same model under the newer layout: a Metaspace
                               pre-tokenizer (prepend_scheme "first", no split), Metaspace decoder
    hf_tokenizers_reference.json   {"<file name>": {"prefix": [ids the post-processor puts before
                               a single sequence], "cases": [{"text", "ids", "decoded"}]}}, where
                               ids = encode(text, add_special_tokens=False).ids and decoded =
                               decode(ids, skip_special_tokens=False)

Training is deterministic for a given `tokenizers` version (this file was made with the one
printed in the output); the committed files, not the training, are what the tests check.
"""

import json
import os

import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "io")

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)

MULTILINGUAL = [
    "Les élèves étudient à l'école; où est la bibliothèque? Ça va très bien, merci.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Größe, Mädchen.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "Emoji: 🙂🚀🎉 and flags 🇫🇷; numbers 12345 67.89 1,000,000 and 3.14159.",
    "Ελληνικά: καλημέρα κόσμε. Русский: привет, мир! עברית: שלום. العربية: مرحبا.",
    "It's, I'm, you're, we've, he'll, she'd, don't, can't, IT'S, We'RE, O'Neil's.",
    "\tTabs\tand\nnewlines\r\nand   runs   of     spaces  \n\n  end",
]

CASES = [
    "Hello world",
    "Hello, world! How are you doing today?",
    "  leading spaces and trailing spaces   ",
    "multiple    spaces\tand\ttabs\nand\nnewlines\r\n\r\nwindows line ends",
    "\n\n\nthree newlines first",
    "numbers: 0 7 42 123 1234 12345678 3.14159 -17 1e10 2,500",
    "contractions: it's I'm you're we've they'll she'd don't IT'S YOU'RE We'Ve",
    "accents: café naïve résumé Ångström Œuvre façade jalapeño",
    "decomposed: cafe\u0301 n\u0303",
    "CJK: 東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다。",
    "emoji: 🙂🚀🎉 👩‍👩‍👧 🇫🇷🇩🇪 ❤️",
    "mixed\u00a0non\u2003breaking\u3000spaces and\u2028separators",
    "symbols: @#$%^&*()[]{}<>~`|\\/ --- ... !!! ??? ''' \"\"\"",
    "unknown script: ᚠᛇᚻ ⠓⠑⠇⠇⠕ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀",
    "a<|endoftext|>b <|endoftext|> c<|endoftext|>",
    "<s>start and end</s> <unk> inside",
    "<|begin_of_text|>Llama three<|eot_id|> done<|end_of_text|>",
    "Four score and seven years ago our fathers brought forth on this continent, a new nation.",
    "x",
    " ",
    "\t",
    "'",
    "' s 's'S'll'LL'",
    "Ω≈ç√∫˜µ≤≥÷ 1234567890 ½ ² Ⅻ ٣",
]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def training_text():
    return [read(os.path.join(DATA, "english.txt"))] + MULTILINGUAL


def train_byte_level():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    return tok


def llama3_layout(gpt2):
    j = json.loads(gpt2.to_str())
    vocab = j["model"]["vocab"]
    added = []
    for content in ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]:
        vocab[content] = len(vocab)
        added.append({"id": vocab[content], "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    j["added_tokens"] = added  # <|endoftext|> stays an ordinary vocabulary entry here, as in Llama-3
    j["model"]["ignore_merges"] = True
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    bos = vocab["<|begin_of_text|>"]
    j["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos], "tokens": ["<|begin_of_text|>"]}}}]}
    return Tokenizer.from_str(json.dumps(j))


def train_sentencepiece():
    # Trained over Metaspace words (so no merge crosses a word), then laid out as Llama-2's file.
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=600 - 256, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    j = json.loads(tok.to_str())
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {}
    for piece in ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]:
        vocab[piece] = len(vocab)
    for piece, _ in trained:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    j["model"]["vocab"] = vocab
    j["added_tokens"] = [{"id": vocab[c], "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for c in ["<unk>", "<s>", "</s>"]]
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return Tokenizer.from_str(json.dumps(j))


def metaspace_layout(llama2):
    j = json.loads(llama2.to_str())
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    j["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    return Tokenizer.from_str(json.dumps(j))


def prefix(tok):
    return tok.encode("", add_special_tokens=True).ids


def main():
    print("tokenizers", tokenizers.__version__)
    gpt2 = train_byte_level()
    llama2 = train_sentencepiece()
    files = {
        "hf_gpt2_tokenizer.json": gpt2,
        "hf_llama3_tokenizer.json": llama3_layout(gpt2),
        "hf_llama2_tokenizer.json": llama2,
        "hf_llama2_metaspace_tokenizer.json": metaspace_layout(llama2),
    }
    reference = {}
    for name, tok in files.items():
        tok.save(os.path.join(DATA, name), pretty=False)
        tok = Tokenizer.from_file(os.path.join(DATA, name))  # what the test reads
        cases = []
        for text in CASES + MULTILINGUAL:
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
        reference[name] = {"prefix": prefix(tok), "cases": cases}
        size = os.path.getsize(os.path.join(DATA, name))
        print(f"{name}: {tok.get_vocab_size()} tokens, {size} bytes")
    with open(os.path.join(DATA, "hf_tokenizers_reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
