// The OpenAI-compatible endpoints: auth (Bearer or X-API-Key, the Tinker keys and tenants), the `model`
// field (base model name, training run id = live weights, tinker:// checkpoint, sampling session id),
// prompts (chat template or completions text / ids), and the hand-off of one engine request per prompt
// to the SamplingService. OpenAiGeneration (openai_generation.cpp) assembles the answer.
#include <map>

#include "api/json_util.h"
#include "api/openai_generation.h"
#include "api/openai_routes.h"

namespace tinkerd::api {

void OpenAiRoutes::add_routes(Router<Route> & router) {
    const auto add = [&](const std::string & method, const std::string & path, Route route) {
        route.needs_auth = false;  // checked by the handler, so the 401 has OpenAI's shape
        route.json_body = false;
        for (const char * prefix : {"/v1/", "/oai/api/v1/"}) {
            router.add(method, prefix + path, route);
        }
    };
    const auto doc = [](const std::string & summary, const std::string & request, const std::string & response) {
        RouteDoc d = route_doc("openai", summary, request, response, KeyCheck::OPENAI);
        if (!request.empty()) {
            d.response_media = {"text/event-stream"};  // with "stream": true
        }
        return d;
    };
    add("GET", "models",
        {nullptr, [this](Call & call, http::Respond respond) { models(call, std::move(respond)); }, false, false,
         doc("Base models, the caller's loaded runs and sampler checkpoints", "", "ModelList")});
    add("POST", "completions",
        {nullptr, [this](Call & call, http::Respond respond) { generate(call, std::move(respond), false); }, false,
         false, doc("Text completion (SSE with stream: true)", "CompletionRequest", "Completion")});
    add("POST", "chat/completions",
        {nullptr, [this](Call & call, http::Respond respond) { generate(call, std::move(respond), true); }, false,
         false,
         doc("Chat completion through the model's chat template (SSE with stream: true)", "ChatCompletionRequest",
             "ChatCompletion")});
}

std::optional<std::string> OpenAiRoutes::tenant_of(const http::Request & request, http::Respond & respond) {
    const std::string key = request_key(request.header("x-api-key"), request.header("authorization"));
    auto tenant = auth_.tenant_of(key);
    if (!tenant) {
        openai::ApiError e;
        e.status = 401;
        e.code = "invalid_api_key";
        e.message = key.empty() ? "You didn't provide an API key (Authorization: Bearer <key> or X-API-Key)."
                                : "Incorrect API key provided.";
        respond(openai_error_response(e));
    }
    return tenant;
}

void OpenAiRoutes::models(Call & call, http::Respond respond) {
    auto tenant = tenant_of(call.req, respond);
    if (!tenant) {
        return;
    }
    // Each entry names its base model (root) and whether it can chat (the base model has a chat template),
    // so a client such as the console can default to a model that chat completions will not refuse.
    const auto can_chat = [&](const std::string & base_model) -> std::optional<bool> {
        const ServedModel * model = registry_.find_model(base_model);
        return model == nullptr ? std::nullopt : std::optional<bool>(model->chat.chat_template != nullptr);
    };
    std::vector<openai::ModelEntry> entries;
    for (const auto & model : registry_.models()) {
        entries.push_back({model->name, started_at_, "tinkerd", model->name, model->chat.chat_template != nullptr});
    }
    for (const RunPtr & run :
         registry_.runs_where([&](const RunState & r) { return r.row.tenant == *tenant && r.loaded && r.ready; })) {
        entries.push_back({run->row.run_id, static_cast<int64_t>(run->row.created_at), *tenant, run->row.base_model,
                           can_chat(run->row.base_model)});
    }
    auto checkpoints = db_.list_tenant_checkpoints(*tenant, store::Page{1000, 0});
    if (checkpoints.ok()) {
        std::map<std::string, std::string> base_of_run;  // one store read per run, not per checkpoint
        for (const auto & row : checkpoints->first) {
            if (row.checkpoint_type != "sampler") {
                continue;
            }
            auto known = base_of_run.find(row.run_id);
            if (known == base_of_run.end()) {
                auto run = db_.get_run(row.run_id);
                known = base_of_run.emplace(row.run_id, run.ok() && run->has_value() ? (**run).base_model : "").first;
            }
            entries.push_back({"tinker://" + row.run_id + "/" + row.checkpoint_id, static_cast<int64_t>(row.created_at),
                               *tenant, known->second, known->second.empty() ? std::nullopt : can_chat(known->second)});
        }
    }
    respond(http::Response::json(200, openai::dump_json(openai::models_list(entries))));
}

// `model` is, in this order: a served base model, a tinker:// checkpoint path (own or published), one of
// the caller's loaded training runs (its live weights), or one of the caller's sampling sessions.
Result<OpenAiRoutes::Target> OpenAiRoutes::resolve_model(const std::string & tenant, const std::string & name) {
    const Error missing = not_found("The model '" + name + "' does not exist or you do not have access to it.");
    Target target;
    target.tenant = tenant;
    target.name = name;
    if ((target.model = registry_.find_model(name)) != nullptr) {
        return target;
    }
    if (name.rfind("tinker://", 0) == 0) {
        auto path = parse_tinker_path(name);
        if (!path.ok() || !registry_.find_checkpoint(tenant, *path, true).ok()) {
            return missing;
        }
        auto run = registry_.find_run_row(tenant, path->run_id, true);
        target.model = run.ok() ? registry_.find_model(run->base_model) : nullptr;
        target.sampler.sampler_id = path->str();
        target.sampler.model_path = path->str();
        return target.model ? Result<Target>(target) : missing;
    }
    if (RunPtr run = registry_.find_tenant_run(tenant, name); run && run->loaded && run->ready) {
        target.model = run->model;
        target.live_adapter = run->adapter.load();
        return target;
    }
    auto sampler = db_.get_sampler(name);
    if (sampler.ok() && sampler->has_value() && (*sampler)->tenant == tenant) {
        target.model = registry_.find_model((*sampler)->base_model);
        target.sampler = **sampler;
        return target.model ? Result<Target>(target) : missing;
    }
    return missing;
}

}  // namespace tinkerd::api
