// The small built-in corpus `epserve make-model` trains its byte-level BPE on: a few KB of
// English prose, code, Markdown/JSON and CJK text, so the learned merges look like a real
// tokenizer's (frequent words and code idioms become single tokens).
#include "text/bpe_trainer.h"

namespace epserve::text {

std::string_view BuiltinTrainingCorpus() {
  return R"CORPUS(The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs into the forest.
A language model reads text as a sequence of tokens. Each token is a piece of a word, a whole word, or a
single byte. The tokenizer turns text into tokens, and the model predicts the next token from the ones
before it. When the model has produced a token, the decoder turns it back into text, one piece at a time.
Mixture-of-experts models route every token to a few experts out of many. Each expert is a small feed-forward
network; a gate chooses which experts see which tokens. With expert parallelism, the experts live on
different machines, and the tokens travel between them: dispatch sends each token to its experts, and
combine brings the results back. The time this takes depends on the network, the batch size, and how
evenly the experts are loaded. We measure throughput in tokens per second and latency in milliseconds.
It's important that the serving system is fast, correct, and easy to run. Don't guess: measure it!
Questions? Answers. Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2048 4096 32000 65536 1000000 3.14159 2.71828
In 2024, the team released version 3; in 2025, they shipped faster kernels (about 30% faster) and a new API.

def encode(text: str) -> list[int]:
    """Returns the token ids of text."""
    ids = []
    for word in pre_tokenize(text):
        if word in cache:
            ids.extend(cache[word])
        else:
            ids.extend(bpe(word))
    return ids

class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.merges = {pair: rank for rank, pair in enumerate(merges)}

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)

#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    printf("%d: %s\n", i, argv[i]);
  }
  return 0;
}

template <typename T>
std::vector<T> Concat(const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<T> out(a);
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

fn main() {
    let words: Vec<&str> = "hello world".split(' ').collect();
    for (i, w) in words.iter().enumerate() {
        println!("{} {}", i, w);
    }
}

function add(a, b) { return a + b; }
const result = [1, 2, 3].map((x) => x * 2).filter((x) => x > 2);
console.log(JSON.stringify({ result, ok: true }));

SELECT name, count(*) FROM requests WHERE status = 'done' GROUP BY name ORDER BY count(*) DESC;

# Serving guide

## Install

1. Run `scripts/setup.sh`.
2. Build with `cmake --build build`.
3. Start the server: `epserve serve --model /models/deepseek-v3 --port 8000`.

| Batch | Tokens/s | Latency (ms) |
|------:|---------:|-------------:|
|     1 |     12.5 |         80.0 |
|    32 |    310.2 |        103.1 |

{"model": "deepseek-v3", "messages": [{"role": "user", "content": "Hello!"}], "temperature": 0.7, "stream": true}
{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there."}}]}

你好，世界！今天天气很好，我们去公园散步吧。深度学习模型需要大量的数据和计算资源。
人工智能正在改变我们的生活和工作方式。这个模型可以理解中文、英文和代码。
こんにちは、世界。東京は日本の首都です。今日はいい天気ですね。
안녕하세요, 세계! 한국어 문장입니다. 오늘 날씨가 좋습니다.
Привет, мир! Это пример текста на русском языке. Γειά σου Κόσμε. مرحبا بالعالم. नमस्ते दुनिया।
Emoji: 😀 🎉 👍 ❤️ 🚀 — and accents: café, naïve, façade, Zürich, São Paulo, Ærø.
The end. Thank you for reading! Have a nice day :)
)CORPUS";
}

}  // namespace epserve::text
