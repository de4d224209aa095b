#!/usr/bin/env python3
"""Writes tests/text/corpus.jsonl: >= 3,000 varied texts (one JSON string per line) for the
tokenizer tests. Deterministic: fixed seed, combinations of the seed fragments below.

    /usr/bin/python3 tests/text/make_corpus.py > tests/text/corpus.jsonl
"""
import json
import random
import sys
import unicodedata

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\n\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "const add = (a, b) => a + b;\nexport default { add };\n// TODO: handle NaN\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, 世界\")\n}\n",
    "<html>\n  <body class=\"main\">\n    <p>Hello &amp; welcome</p>\n  </body>\n</html>\n",
    "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot product",
    "    x = [i**2 for i in range(100) if i % 3 == 0]\r\n    print(x)\r\n",
    "template <typename T>\nstd::vector<T> Map(const std::vector<T>& v) {\n  return v;\n}\n",
    "$ ls -la /usr/local/bin | grep -E '^d' && echo \"done\" >> ~/.log 2>&1",
    "public static void Main(string[] args) { Console.WriteLine($\"{args.Length} args\"); }",
]
MARKDOWN = [
    "# Title\n\n## Section 1.2\n\n- item one\n- item **two**\n- `code`\n\n> quote\n",
    "| col A | col B |\n|------:|:------|\n| 1.5   | x     |\n| 22    | yy    |\n",
    "1. First\n2. Second\n   * nested [link](https://example.com/a?b=c&d=e#f)\n",
    "```python\nprint('hi')\n```\n\n***bold italic*** and ~~strike~~\n",
]
JSONS = [
    '{"name": "Alice", "age": 30, "tags": ["a", "b"], "nested": {"x": 1.5e-3, "ok": true}}',
    '[{"id":1},{"id":2,"v":null},{"id":3,"s":"\\u00e9\\n"}]',
    '{\n  "model": "deepseek-v3",\n  "temperature": 0.7,\n  "max_tokens": 1024\n}',
]
ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll agree: it's what we've been waiting for!",
    "Don't panic. Isn't it strange? They're here, and we'd better go.",
    "In 1969, Apollo 11 landed on the Moon; 600 million people watched.",
    "e-mail: john.doe+test@example.co.uk, phone: +1 (555) 123-4567",
    "Prices rose 3.75% to $1,234.56 (Q3 2024), up from €999.",
    "HELLO WORLD!!! what's UP??? ... ok...",
    "    Indented line with trailing spaces   ",
    "Mr. O'Neil's dog—a 3-year-old—ran 5km in 20min.",
]
CJK = [
    "你好，世界！今天天气很好。", "深度学习模型需要大量的数据和计算资源。", "我们在2024年发布了新版本，性能提升了30%。",
    "人工智能（AI）正在改变世界", "這是繁體中文的句子，包含「引號」與標點。", "中文English混合text测试123",
]
JAPANESE = ["こんにちは、世界！", "東京は日本の首都です。カタカナとひらがなが混ざっています。", "ｶﾀｶﾅ 半角と全角ＡＢＣ１２３",
            "今日はいい天気ですね〜♪"]
KOREAN = ["안녕하세요, 세계!", "한국어 문장입니다. 띄어쓰기가 있습니다.", "서울특별시 강남구 123번지"]
ARABIC = ["مرحبا بالعالم", "اللغة العربية جميلة جداً ١٢٣٤", "السلام عليكم ورحمة الله"]
HINDI = ["नमस्ते दुनिया", "हिन्दी भाषा में वाक्य। १२३", "क्षत्रिय ज्ञान श्री"]
THAI = ["สวัสดีครับ", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "กรุงเทพมหานคร ๑๒๓"]
OTHER = ["Привет, мир! Ёжик в тумане.", "Γειά σου Κόσμε", "שלום עולם", "Tiếng Việt có dấu: ắ ằ ẳ ẵ ặ",
         "Zürich, Ærøskøbing, naïve café, façade, Œuvre", "ğüşıöç İstanbul", "ᚠᛇᚻ᛫ᛒᛦᚦ", "ꦲꦏ꧀ꦱꦫ"]
EMOJI = ["👋", "😀", "🎉🎉🎉", "👨‍👩‍👧‍👦", "👍🏽", "🧑🏿‍💻", "🏳️‍🌈", "❤️‍🔥", "🇯🇵🇺🇸", "✊🏻✊🏼✊🏽✊🏾✊🏿",
         "👩🏻‍❤️‍💋‍👨🏼", "1️⃣", "#️⃣", "🐈‍⬛", "©️®️™️"]
COMBINING = ["e\u0301", "a\u0308\u0304", "n\u0303", "\u1100\u1161\u11a8", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d",
             "o\u0336v\u0336e\u0336r\u0336", "क\u094d\u0937", "\u0915\u093f"]
SPECIAL = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>",
           "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜▁pad▁｜>",
           "<｜place▁holder▁no▁1｜>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<|im_start|>", "<｜User", "User｜>",
           "<｜｜>", "<｜begin▁of▁sentence", "<s>", "</s>", "<think>", "</think>"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n", "\n \n", "   \n\n\n   ", "\u00a0",
          "\u3000", "\u2003", "\u200b", "\ufeff", "\u2028", "\u0085", "\x0b\x0c", " \t \t", "\n\t\t"]
WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by word "
         "but not what all were we when your can said there use an each which she do how their if will up other about "
         "out many then them these so some her would make like him into time has look two more write go see number no "
         "way could people my than first water been call who oil its now find long down day did get come made may part "
         "tokenizer encoding decoding transformer attention expert mixture parallelism throughput latency").split()

# Ranges of long-assigned code points (no surrogates, no unassigned blocks whose Unicode version
# differs between libraries).
RANGES = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
          (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x23FF),
          (0x2500, 0x27BF), (0x3000, 0x30FF), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF),
          (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1D400, 0x1D4FF), (0x10000, 0x1007F)]


def random_codepoints(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(RANGES)
        cp = rng.randint(lo, hi)
        c = chr(cp)
        if unicodedata.category(c) in ("Cn", "Cs", "Co"):
            c = "?"
        out.append(c)
    return "".join(out)


def digits(rng):
    n = rng.choice([1, 2, 3, 4, 5, 7, 10, 16, 33])
    s = "".join(rng.choice("0123456789") for _ in range(n))
    return rng.choice([s, s + "." + s[:2], "-" + s, s + "," + s, "٣٤٥" + s, "１２３" + s, "Ⅻ" + s, "²³" + s])


def sentence(rng):
    k = rng.randint(1, 14)
    words = [rng.choice(WORDS) for _ in range(k)]
    if rng.random() < 0.3:
        words[0] = words[0].capitalize()
    if rng.random() < 0.2:
        words[rng.randrange(k)] = words[rng.randrange(k)].upper()
    return " ".join(words) + rng.choice([".", "!", "?", ",", ";", ":", "", "...", " -", "'s", "n't"])


POOLS = [CODE, MARKDOWN, JSONS, ENGLISH, CJK, JAPANESE, KOREAN, ARABIC, HINDI, THAI, OTHER, EMOJI, COMBINING,
         SPECIAL, SPACES]


def fragment(rng):
    r = rng.random()
    if r < 0.08:
        return digits(rng)
    if r < 0.25:
        return sentence(rng)
    if r < 0.30:
        return random_codepoints(rng, rng.randint(1, 12))
    return rng.choice(rng.choice(POOLS))


def variants(text, rng):
    v = rng.random()
    if v < 0.1:
        return unicodedata.normalize("NFD", text)
    if v < 0.15:
        return unicodedata.normalize("NFKC", text)
    if v < 0.2:
        return text.upper()
    return text


def main():
    rng = random.Random(20260112)
    items = []
    # Every seed fragment alone, and every pair of pools once.
    for pool in POOLS:
        items.extend(pool)
    for a in POOLS:
        for b in POOLS:
            items.append(rng.choice(a) + rng.choice(SPACES + ["", ""]) + rng.choice(b))
    # Hand-made edge cases.
    items += ["", " ", "a", "\n" * 50, " " * 100, "\t" * 30 + "x", "x" + " " * 37 + "y", "\r\n" * 20,
              "a" * 500, "ab" * 300, "supercalifragilisticexpialidocious" * 10, "🎉" * 100, "中" * 300,
              "1" * 200, "1 2 3 4 5 6 7 8 9 10 11 12 1234 12345 123456", "x" * 3000 + " end",
              "<｜User｜><｜User｜><｜Assistant｜>", "text<｜end▁of▁sentence｜>more", " <｜User｜> spaced <｜Assistant｜> ",
              "<<｜User｜>>", "<｜User｜" * 5, "trailing spaces   \n   \n", "mixed\ttabs\t \tand spaces"]
    # Combinations of 1-8 fragments with random joiners and variants.
    while len(items) < 3200:
        k = rng.randint(1, 8)
        parts = [variants(fragment(rng), rng) for _ in range(k)]
        joiner = rng.choice(["", " ", "\n", "", " ", "\n\n", "\t", "  "])
        items.append(joiner.join(parts))
    for text in items:
        sys.stdout.write(json.dumps(text, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
