#include "io/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/json.h"

namespace epserve {

StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  auto ck = std::make_unique<Checkpoint>();
  ck->dir_ = dir;
  if (!fs::is_directory(dir)) return Status::NotFound(dir + ": not a checkpoint directory");
  ASSIGN_OR_RETURN(ck->config_text_, ReadTextFile(dir + "/config.json"));

  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (fs::exists(index_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
    ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, index_path));
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return Status::DataLoss(index_path + ": want an object with an object \"weight_map\"");
    std::set<std::string> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return Status::DataLoss(index_path + ": weight_map[" + it.key() + "] is not a file name");
      if (it.value().get<std::string>().find('/') != std::string::npos)
        return Status::DataLoss(index_path + ": weight_map[" + it.key() + "]: " +
                                it.value().dump() + " is not a file of the checkpoint directory");
      weight_map[it.key()] = it.value().get<std::string>();
      files.insert(it.value().get<std::string>());
    }
    shard_names.assign(files.begin(), files.end());
    ck->listing_path_ = index_path;
  } else if (fs::exists(dir + "/model.safetensors")) {
    shard_names.push_back("model.safetensors");
    ck->listing_path_ = dir + "/model.safetensors";
  } else {
    return Status::NotFound(dir + ": neither model.safetensors nor model.safetensors.index.json");
  }

  for (const auto& shard : shard_names) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir + "/" + shard));
    for (const auto& [name, info] : file->tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(name);
        if (it == weight_map.end() || it->second != shard)
          return Status::DataLoss(file->path() + ": tensor " + name +
                                  " is not mapped to this file by " + index_path);
      }
      if (ck->tensors_.count(name))
        return Status::DataLoss(file->path() + ": tensor " + name + " appears in two files");
      ck->tensors_[name] = &info;
    }
    ck->files_.push_back(std::move(file));
  }
  for (const auto& [name, shard] : weight_map) {
    if (!ck->tensors_.count(name))
      return Status::DataLoss(dir + "/" + shard + ": tensor " + name +
                              " listed in the index is missing from the file");
  }
  return ck;
}

const TensorInfo* Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

}  // namespace epserve
