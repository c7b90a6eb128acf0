#include "cli/sampling_flags.h"

namespace tracelm::cli {

void add_sampling_flags(CLI::App& app, sampling::SamplingOptions& o) {
    app.add_option("--temperature", o.temperature, "sampling temperature (0: greedy, the default)");
    app.add_option("--top-k", o.top_k, "sample among the k most likely tokens (0: off)");
    app.add_option("--top-p", o.top_p, "sample within the smallest set of tokens of this mass, in (0, 1]");
    app.add_option("--min-p", o.min_p, "drop tokens below this fraction of the most likely one's probability");
    app.add_option("--repeat-penalty", o.repeat_penalty, "penalty on tokens seen in the prompt or output (1: off)");
    app.add_option("--presence-penalty", o.presence_penalty, "subtracted from generated tokens' logits (0: off)");
    app.add_option("--frequency-penalty", o.frequency_penalty, "subtracted per occurrence in the output (0: off)");
    app.add_option("--seed", o.seed, "random seed (default: a random one, reported with --json)");
    app.add_option("--logprobs", o.logprobs, "report each token's log-probability and the N best (N <= 20)");
}

nlohmann::json logprobs_json(const std::vector<sampling::TokenLogprobs>& lps) {
    nlohmann::json out = nlohmann::json::array();
    for (const sampling::TokenLogprobs& t : lps) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& [id, lp] : t.top) top.push_back({{"id", id}, {"logprob", lp}});
        out.push_back({{"id", t.id}, {"logprob", t.logprob}, {"top_logprobs", top}});
    }
    return out;
}

}  // namespace tracelm::cli
