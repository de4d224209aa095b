// DeepSeek-V3.2's sparse attention through Model::Forward (the numerics against the float64
// reference are tests/reference's; these pin the engine-side contracts).
#include "model/sparse_indexer.h"

#include <gtest/gtest.h>

#include "io/checkpoint.h"
#include "model/model.h"
#include "model/test_util.h"

namespace epserve {
namespace sparse_test {

using testing::Load;
using testing::Loaded;
using testing::Prompt;

// Prefill logits of one prompt, for `config` (the checkpoint's, or a variant of it).
std::vector<float> Logits(const Loaded& m, const ModelConfig& config, const std::vector<int32_t>& p,
                          KvDType dtype = KvDType::kF32) {
  ThreadPool pool(2);
  Model model(config, *m.w, pool);
  LatentKvCache cache = LatentKvCache::For(config, config.num_hidden_layers, 1, 64, dtype);
  std::vector<float> logits(config.vocab_size);
  Status st = model.Forward({{{0, p}}}, cache, logits.data());
  CHECK(st.ok()) << st.message();
  return logits;
}

TEST(SparseAttentionTest, EqualsDenseMlaUpToIndexTopkAndDiffersBeyond) {
  Loaded m = Load(testing::MakeTiny("dsa", "tiny-v32"));
  ASSERT_EQ(m.config.sparse.index_topk, 16);
  ModelConfig dense = m.config;
  dense.sparse = {};  // the same weights, the indexer ignored
  for (KvDType dtype : {KvDType::kF32, KvDType::kBF16}) {
    // 16 positions or fewer: every token attends to all its positions, the dense bits.
    for (int n : {1, 7, 16})
      EXPECT_EQ(Logits(m, m.config, Prompt(n, 5), dtype), Logits(m, dense, Prompt(n, 5), dtype))
          << n << " tokens";
    // 33: tokens past position 15 attend to 16 of their positions.
    const std::vector<float> sparse = Logits(m, m.config, Prompt(33, 5), dtype),
                             full = Logits(m, dense, Prompt(33, 5), dtype);
    double diff = 0;
    for (size_t i = 0; i < sparse.size(); ++i)
      diff = std::max<double>(diff, std::fabs(sparse[i] - full[i]));
    EXPECT_GT(diff, 1e-3) << "sparse attention changed nothing";
  }
}

// A topk of the whole context is dense attention again (the indexer runs, selects everything).
TEST(SparseAttentionTest, TopkOfTheWholeContextIsDense) {
  Loaded m = Load(testing::MakeTiny("dsa_all", "tiny-v32"));
  ModelConfig all = m.config, dense = m.config;
  all.sparse.index_topk = 64;
  dense.sparse = {};
  EXPECT_EQ(Logits(m, all, Prompt(33, 9)), Logits(m, dense, Prompt(33, 9)));
}

TEST(SparseAttentionTest, CacheRowsCarryTheIndexerKey) {
  const ModelConfig c = PresetConfig("v32").value();
  EXPECT_EQ(IndexKeyBytes(c), 132);
  EXPECT_EQ(KvRowWidth(c, KvDType::kBF16), 576 + 66);
  EXPECT_EQ(KvRowWidth(c, KvDType::kF32), 576 + 33);
  EXPECT_EQ(KvRowWidth(PresetConfig("v3").value(), KvDType::kBF16), 576);
  // A cache without the key's bytes does not fit a V3.2 model.
  Loaded m = Load(testing::MakeTiny("dsa_fit", "tiny-v32"));
  ThreadPool pool(1);
  Model model(m.config, *m.w, pool);
  LatentKvCache narrow(m.config.num_hidden_layers, m.config.kv_a_dim(), 1, 8);
  std::vector<float> logits(m.config.vocab_size);
  EXPECT_FALSE(model.Forward({{{0, {1, 2}}}}, narrow, logits.data()).ok());
}

}  // namespace sparse_test
}  // namespace epserve
