#pragma once
// Train files that tests on several beds share (the e2e tests on one machine, the fault tests on
// the network-namespace bed).

#include <string>

namespace rayd::testing {

// A 2-rank run of the example CNN on Fashion-MNIST whose preprocessing can run only on a node
// labelled kind=cpu: both datasets standardized by a stateful map's actors there
// (examples/trainables/fashion_transforms.cc), the validation blocks made by tasks needing a CPU
// there. The ranks need a `trainer` resource that only the trainers' node should have. Results
// go to `storage`/`name`.
inline std::string SplitPreprocessingYaml(const std::string& name, const std::string& storage) {
  const std::string standardize =
      "      - {map_batches: StandardizeImages, paths: "
      "[/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz],\n"
      "         sample_rows: 2000, label_selector: {kind: cpu}}\n";
  return "name: " + name + R"(
train_loop: fashion_mnist_cnn
config: {lr: 0.1, batch_size: 32, epochs: 1}
scaling: {num_workers: 2, resources_per_worker: {CPU: 1, trainer: 1}}
datasets:
  train:
    format: idx
    paths: [/usr/share/datasets/fashion-mnist/train-*-ubyte.gz]
    transforms:
      - {limit: 2000}
)" + standardize + R"(  validation:
    format: idx
    paths: [/usr/share/datasets/fashion-mnist/t10k-*-ubyte.gz]
    shuffle: false
    execution: tasks
    resources: {CPU: 1}
    label_selector: {kind: cpu}
    transforms:
      - {limit: 1000}
)" + standardize + "run: {storage_path: " + storage + "}\n";
}

}  // namespace rayd::testing
