// OpenAiRoutes: the OpenAI-compatible endpoints, under /v1/ and /oai/api/v1/: /models, /completions and
// /chat/completions. Their own auth answers (OpenAI-shaped 401s), the `model` field's resolution (base
// model, tinker:// checkpoint, a training run's live weights, a sampling session), prompts (chat template
// or completions text / token ids), and one SamplingService request per prompt whose events an
// OpenAiGeneration turns into a body or an SSE stream (openai_generation.h).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include "api/auth.h"
#include "api/registry.h"
#include "api/router.h"
#include "api/sampling_service.h"
#include "store/database.h"

namespace tinkerd::api {

class OpenAiGeneration;

class OpenAiRoutes {
  public:
    OpenAiRoutes(const Auth & auth, Registry & registry, store::Database & db, SamplingService & sampling)
        : auth_(auth), registry_(registry), db_(db), sampling_(sampling) {}

    void add_routes(Router<Route> & router);

  private:
    // Where a request's `model` points.
    struct Target {
        ServedModel * model = nullptr;
        store::SamplerRow sampler;                      // base model, checkpoint or sampling session
        std::optional<engine::AdapterId> live_adapter;  // a training run's live weights
        std::string tenant;                             // the caller (usage counts)
        std::string name;                               // the `model` the request named
    };
    // The caller's tenant, or nullopt after answering an OpenAI-shaped 401.
    std::optional<std::string> tenant_of(const http::Request & request, http::Respond & respond);
    void models(Call & call, http::Respond respond);
    // openai_generate.cpp: /completions and /chat/completions.
    void generate(Call & call, http::Respond respond, bool chat);
    Result<Target> resolve_model(const std::string & tenant, const std::string & name);
    void submit_generation(const std::shared_ptr<OpenAiGeneration> & generation, const Target & target);

    const Auth & auth_;
    Registry & registry_;
    store::Database & db_;
    SamplingService & sampling_;
    const int64_t started_at_ = static_cast<int64_t>(std::time(nullptr));  // "created" of the base models
};

}  // namespace tinkerd::api
