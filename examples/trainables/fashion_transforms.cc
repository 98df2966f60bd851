// A stateful transform for rayd Data: standardizes images with statistics it measures once, when
// its actor starts, from a sample of a dataset's rows (what torchvision users hard-code as
// Normalize((0.2860,), (0.3530,)) for Fashion-MNIST). It runs on a pool of actors, placed like
// any actor, so the measuring happens once per actor, not once per batch:
//
//   transforms:
//     - {map_batches: StandardizeImages, paths: [/usr/share/datasets/fashion-mnist/train-*],
//        concurrency: 1, resources: {CPU: 1}, label_selector: {kind: cpu}}
//
// Arguments: paths (required) and format (default idx) of the dataset to measure, column
// (default image), sample_rows (default 10000). The column, uint8 in [0, 255], becomes float32
// (x / 255 - mean) / std; other columns pass through.

#include <rayd/data/reader.h>
#include <rayd/data/transforms.h>

#include <cmath>
#include <stdexcept>

namespace {

using rayd::data::Block;
using rayd::data::BlockBuilder;
using rayd::data::Column;
using rayd::data::DType;

class StandardizeImages : public rayd::data::BatchMapper {
 public:
  explicit StandardizeImages(const nlohmann::json& args)
      : column_(args.value("column", std::string("image"))) {
    rayd::data::DatasetSpec spec{.name = "StandardizeImages",
                                 .format = args.value("format", std::string("idx")),
                                 .paths = args.at("paths").get<std::vector<std::string>>()};
    auto reader = rayd::data::OpenReader(spec);
    if (!reader.ok()) throw std::runtime_error(reader.status().message());
    const int64_t n = std::min<int64_t>(args.value("sample_rows", int64_t{10000}),
                                        (*reader)->num_rows());
    std::vector<int64_t> rows(n);
    for (int64_t i = 0; i < n; ++i) rows[i] = i * ((*reader)->num_rows() / std::max<int64_t>(n, 1));
    auto sample = (*reader)->Read(rows);
    if (!sample.ok()) throw std::runtime_error(sample.status().message());
    const Column* c = Pixels(*sample);
    const int64_t count = sample->num_rows() * c->RowElements();
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < count; ++i) {
      const double x = c->As<uint8_t>()[i] / 255.0;
      sum += x;
      squares += x * x;
    }
    mean_ = static_cast<float>(sum / std::max<int64_t>(count, 1));
    std_ = static_cast<float>(std::sqrt(std::max(squares / std::max<int64_t>(count, 1) -
                                                     double(mean_) * mean_,
                                                 1e-12)));
  }

  rayd::Result<Block> operator()(const Block& batch) override {
    const Column* c = batch.Find(column_);
    if (c == nullptr || c->is_bytes() || c->dtype() != DType::kUInt8) {
      return rayd::Status::InvalidArgument("StandardizeImages: the batch has no uint8 column '" +
                                           column_ + "'");
    }
    BlockBuilder out(batch.num_rows());
    for (const Column& other : batch.columns()) {
      if (other.name() != column_) out.AddColumn(other, nullptr);
    }
    auto* to = reinterpret_cast<float*>(
        out.AddFixed({column_, DType::kFloat32, c->schema.shape}));
    const int64_t count = batch.num_rows() * c->RowElements();
    const float scale = 1.0f / (255.0f * std_), shift = mean_ / std_;
    for (int64_t i = 0; i < count; ++i) to[i] = c->As<uint8_t>()[i] * scale - shift;
    Block result = std::move(out).Finish();
    return Block(result.num_rows(), result.columns(),
                 {std::make_shared<Block>(batch), std::make_shared<Block>(result)});
  }

 private:
  const Column* Pixels(const Block& sample) const {
    const Column* c = sample.Find(column_);
    if (c == nullptr || c->is_bytes() || c->dtype() != DType::kUInt8) {
      throw std::runtime_error("StandardizeImages: the dataset has no uint8 column '" + column_ +
                               "'");
    }
    return c;
  }

  const std::string column_;
  float mean_ = 0;
  float std_ = 1;
};

}  // namespace

RAYD_DATA_MAP_CLASS(StandardizeImages);
