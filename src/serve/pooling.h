// The pooling a model's makers chose for its embeddings, as its files name it: a GGUF's <arch>.pooling_type
// (llama.cpp's enum: 0 none, 1 mean, 2 cls, 3 last, 4 rank) or a folder's sentence-transformers
// 1_Pooling/config.json. POST /v1/embeddings computes last-token pooling only (docs/serve.md), so a model whose files
// name another pooling gets no embeddings rather than vectors its makers did not intend.
#pragma once

#include <string>

#include "formats/gguf.h"

namespace tracelm::serve {

enum class Pooling { Unspecified, Last, Mean, Cls, Other };

Pooling gguf_pooling(const GgufFile& g);
// The sentence-transformers pooling config: its pooling_mode name, or which one pooling_mode_* flag is true
// (several: a concatenation, Other); Unspecified when it names none. Throws std::runtime_error naming `source`
// when it is not a JSON object.
Pooling sentence_transformers_pooling(const std::string& json_text, const std::string& source);
// `folder`'s 1_Pooling/config.json; Unspecified when there is none.
Pooling folder_pooling(const std::string& folder);
// Whether /v1/embeddings serves the model: it names last-token pooling, or none (a chat model).
inline bool embeds(Pooling p) { return p == Pooling::Unspecified || p == Pooling::Last; }

}  // namespace tracelm::serve
