//! The LLM strategist and coder against a local replay server (`llm_server`): both wire
//! formats as sent, recorded good replies, and every bad answer an endpoint or a model
//! can give. No network: everything runs on 127.0.0.1.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use expect_test::expect;
use kernel_lsp::document::Document;
use kernel_lsp::optimize::catalog::{Catalog, Strategy};
use kernel_lsp::optimize::llm::{
    splice_unit, Backoff, Budget, CoderInput, LlmClient, LlmCoder, LlmError, LlmStepError, Prompts,
    ReplyError, Strategist, StrategyInput,
};
use kernel_lsp::settings::{ModelSettings, Provider};
use kernel_lsp::syntax::{self, Lang};
use serde_json::json;

use crate::llm_server::{closed_port_url, ReplayServer, Scripted};

const OPENAI_KEY_VAR: &str = "KERNEL_LSP_E2E_OPENAI_KEY";
const OPENAI_KEY: &str = "sk-e2e-openai-0123456789";
const ANTHROPIC_KEY_VAR: &str = "KERNEL_LSP_E2E_ANTHROPIC_KEY";
const ANTHROPIC_KEY: &str = "sk-ant-e2e-9876543210";
const UNSET_VAR: &str = "KERNEL_LSP_E2E_NO_SUCH_KEY";

fn set_keys() {
    // Each test sets the same values, so parallel tests cannot disagree.
    std::env::set_var(OPENAI_KEY_VAR, OPENAI_KEY);
    std::env::set_var(ANTHROPIC_KEY_VAR, ANTHROPIC_KEY);
}

fn model(provider: Provider, url: &str, key_var: &str) -> ModelSettings {
    set_keys();
    let mut s = ModelSettings::new(provider, "test-model");
    s.url = Some(url.to_string());
    s.api_key_env = Some(key_var.to_string());
    s.max_retries = 2;
    s.timeout_ms = 5_000;
    s
}

fn fast() -> Backoff {
    Backoff {
        base: Duration::from_millis(5),
        cap: Duration::from_millis(20),
        retry_after_cap: Duration::from_secs(5),
    }
}

fn client(s: &ModelSettings) -> LlmClient {
    LlmClient::new(s).unwrap().with_backoff(fast())
}

fn coder(s: &ModelSettings) -> LlmCoder {
    LlmCoder {
        client: client(s),
        prompts: Prompts::load(None).unwrap(),
    }
}

fn strategist(s: &ModelSettings) -> Strategist {
    Strategist {
        client: client(s),
        prompts: Prompts::load(None).unwrap(),
    }
}

fn example(name: &str) -> String {
    let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The file's model and the named kernel.
fn analyze(lang: Lang, text: &str, kernel: &str) -> (syntax::FileModel, syntax::Kernel) {
    let doc = Document::new(lang, 1, text);
    let model = syntax::analyze(lang, text, doc.tree().expect("parsed"));
    let k = model.kernel(kernel).expect("kernel in fixture").clone();
    (model, k)
}

fn coder_input(lang: Lang, text: &str, kernel: &syntax::Kernel) -> CoderInput {
    CoderInput {
        kernel_name: kernel.name.clone(),
        lang,
        param_names: kernel.params.iter().map(|p| p.name.clone()).collect(),
        kernel_unit: text[kernel.def_range.clone()].to_string(),
        spec: kernel
            .spec
            .range
            .clone()
            .map_or(String::new(), |r| text[r].to_string()),
        step: "restrict_const: mark pointer parameters `__restrict__`, read-only ones `const`."
            .into(),
        facts: "- one element per thread\n- registers: 8, spills: 0".into(),
        device: "NVIDIA H100 80GB HBM3: 132 SMs, 50 MiB L2".into(),
    }
}

fn saxpy_input() -> CoderInput {
    let text = example("saxpy.cu");
    let (_, k) = analyze(Lang::Cuda, &text, "saxpy");
    coder_input(Lang::Cuda, &text, &k)
}

fn catalog() -> Catalog {
    let step = |id: &str| Strategy {
        id: id.into(),
        title: id.into(),
        description: format!("{id} description"),
        lang: vec![Lang::Cuda, Lang::Triton],
        requires: Vec::new(),
        params: BTreeMap::new(),
        rewrite: None,
        prior: 0.0,
        sweep: false,
    };
    Catalog {
        strategies: vec![step("restrict_const"), step("launch_bounds")],
    }
}

fn strategy_input() -> StrategyInput {
    StrategyInput {
        kernel_name: "saxpy".into(),
        lang: "CUDA".into(),
        kernel_unit: saxpy_input().kernel_unit,
        spec: saxpy_input().spec,
        facts: "- one element per thread".into(),
        device: "H100".into(),
        timing: "median 0.152 ms (no baseline yet)".into(),
        history: "(none)".into(),
        catalog: "- restrict_const: ...\n- launch_bounds: ...".into(),
        // As `optimize --profile` fills it, from the recorded H100 profile of saxpy.
        profile: {
            let all = kernel_lsp::profile::parse_raw_csv(include_str!("../fixtures/ncu/saxpy.csv"))
                .expect("the fixture parses");
            format!("Diagnosis: {}\n", all[0].diagnosis())
        },
    }
}

#[tokio::test]
async fn openai_wire_format_key_and_a_recorded_coder_reply_spliced() {
    let server = ReplayServer::start(vec![Scripted::fixture("openai_saxpy_coder.json")]);
    let s = model(
        Provider::OpenAi,
        &format!("{}/v1", server.url()),
        OPENAI_KEY_VAR,
    );
    let mut budget = Budget::new(6);
    let input = saxpy_input();
    let unit = coder(&s).rewrite(&mut budget, &input).await.unwrap();

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        r.headers.get("authorization").map(String::as_str),
        Some(&*format!("Bearer {OPENAI_KEY}"))
    );
    assert!(!r.headers.contains_key("x-api-key"));
    assert_eq!(r.body["model"], "test-model");
    assert_eq!(r.body["max_tokens"], 4096);
    assert_eq!(r.body["temperature"], 0.2);
    assert_eq!(r.body["messages"][0]["role"], "system");
    assert!(r.body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("You are the coder of kernel-lsp"));
    assert_eq!(r.body["messages"][1]["role"], "user");
    let user = r.body["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.contains(&input.kernel_unit) && user.contains("## Step to carry out\nrestrict_const"),
        "{user}"
    );
    assert!(
        !input.kernel_unit.contains("@bench")
            && user
                .contains("## Its `@bench` lines (the spec; only launch lines may change)\n```\n")
            && user.contains("// @bench n = 1 << 24, 4099"),
        "the unit is sent without its spec, and the spec in its own section: {user}"
    );
    // Token counts from the recorded reply.
    assert_eq!(
        (budget.used(), budget.input_tokens, budget.output_tokens),
        (1, 912, 141)
    );

    // The unit splices into the author's file under the untouched spec.
    let text = example("saxpy.cu");
    let (model, k) = analyze(Lang::Cuda, &text, "saxpy");
    assert!(unit.spec.is_empty(), "the reply keeps the launch");
    let out = splice_unit(&text, &model, &k, &unit.unit).unwrap();
    assert!(out.contains("// @bench grid = cdiv(n, 256); block = 256\nextern \"C\" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {"), "{out}");
    assert!(out.contains("int main()"));
}

#[tokio::test]
async fn no_key_header_when_the_variable_is_unset() {
    let server = ReplayServer::start(vec![Scripted::fixture("openai_saxpy_coder.json")]);
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    coder(&s)
        .rewrite(&mut Budget::new(1), &saxpy_input())
        .await
        .unwrap();
    let r = &server.requests()[0];
    assert_eq!(r.path, "/chat/completions");
    assert!(
        !r.headers.contains_key("authorization") && !r.headers.contains_key("x-api-key"),
        "{:?}",
        r.headers
    );
}

#[tokio::test]
async fn anthropic_wire_format_and_a_recorded_strategy_reply() {
    let server = ReplayServer::start(vec![Scripted::fixture("anthropic_strategy.json")]);
    let s = model(Provider::Anthropic, &server.url(), ANTHROPIC_KEY_VAR);
    let mut budget = Budget::new(6);
    let p = strategist(&s)
        .propose(&mut budget, &strategy_input(), &catalog())
        .await
        .unwrap();
    assert_eq!(p.id, "restrict_const");
    assert!(
        p.rationale.starts_with("memory-bound streaming kernel"),
        "{}",
        p.rationale
    );
    assert_eq!((p.params.len(), p.free_form), (0, None));

    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(
        r.headers.get("x-api-key").map(String::as_str),
        Some(ANTHROPIC_KEY)
    );
    assert_eq!(
        r.headers.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert!(!r.headers.contains_key("authorization"));
    assert_eq!(r.body["model"], "test-model");
    let user = r.body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        user.contains("## Profile (Nsight Compute)\nDiagnosis: memory-bound at 79% of DRAM peak; 89% of stalls are long scoreboard"),
        "the strategist sees the profile: {user}"
    );
    assert!(r.body["system"]
        .as_str()
        .unwrap()
        .starts_with("You are the strategy model of kernel-lsp"));
    let messages = r.body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    let user = messages[0]["content"].as_str().unwrap();
    assert!(
        user.contains("## Catalog of steps\n- restrict_const") && user.contains("median 0.152 ms"),
        "{user}"
    );
    assert_eq!((budget.input_tokens, budget.output_tokens), (1480, 77));
}

#[tokio::test]
async fn anthropic_needs_its_key() {
    let s = model(Provider::Anthropic, "http://127.0.0.1:9", UNSET_VAR);
    let err = LlmClient::new(&s).unwrap_err();
    assert!(matches!(err, LlmError::MissingKey { .. }));
    expect!["the API key variable `KERNEL_LSP_E2E_NO_SUCH_KEY` is not set; export it where kernel-lsp starts, or set `apiKeyEnv` to the variable that holds the key"]
        .assert_eq(&err.to_string());
}

#[tokio::test]
async fn a_recorded_triton_reply_from_ollama_splices() {
    let server = ReplayServer::start(vec![Scripted::fixture("ollama_vector_add_coder.json")]);
    let s = model(Provider::OpenAi, &format!("{}/v1", server.url()), UNSET_VAR);
    let text = example("vector_add.py");
    let (file_model, k) = analyze(Lang::Triton, &text, "add_kernel");
    let input = coder_input(Lang::Triton, &text, &k);
    let unit = coder(&s)
        .rewrite(&mut Budget::new(1), &input)
        .await
        .unwrap();
    let out = splice_unit(&text, &file_model, &k, &unit.unit).unwrap();
    assert!(out.contains("# @bench tune BLOCK in [64, 256, 1024, 2048]\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(axis=0)\n    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    offs = tl.max_contiguous"), "{out}");
}

#[tokio::test]
async fn unreachable_endpoint() {
    let url = closed_port_url();
    let s = model(Provider::OpenAi, &url, UNSET_VAR);
    let err = coder(&s)
        .rewrite(&mut Budget::new(1), &saxpy_input())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            &err,
            LlmStepError::Call {
                source: LlmError::Unreachable { .. },
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.starts_with(&format!(
            "coder model `test-model`: cannot reach the model endpoint {url}/chat/completions: "
        )),
        "{msg}"
    );
    assert!(
        msg.contains("(after 2 retries); check the `url` setting"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
}

#[tokio::test]
async fn slow_endpoint_times_out_without_retrying() {
    let server = ReplayServer::start(vec![
        Scripted::fixture("openai_saxpy_coder.json").delayed(Duration::from_secs(3)),
        Scripted::fixture("openai_saxpy_coder.json"),
    ]);
    let mut s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    s.timeout_ms = 300;
    let started = Instant::now();
    let err = coder(&s)
        .rewrite(&mut Budget::new(1), &saxpy_input())
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        err.to_string(),
        format!("coder model `test-model`: the model endpoint {}/chat/completions did not answer within 300 ms; raise `timeoutMs` or use a faster model", server.url())
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn rate_limited_then_answered_honours_retry_after() {
    let server = ReplayServer::start(vec![
        Scripted::fixture("openai_rate_limited.json"), // Retry-After: 1
        Scripted::fixture("openai_saxpy_coder.json"),
    ]);
    let s = model(Provider::OpenAi, &server.url(), OPENAI_KEY_VAR);
    let started = Instant::now();
    let mut budget = Budget::new(1);
    coder(&s)
        .rewrite(&mut budget, &saxpy_input())
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(server.requests().len(), 2);
    assert_eq!(budget.used(), 1, "retries are one call of the budget");
}

#[tokio::test]
async fn rate_limited_forever() {
    let limited = Scripted::json(429, &json!({"error": {"message": "slow down"}}));
    let server = ReplayServer::start(vec![limited.clone(), limited.clone(), limited]);
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    let err = coder(&s)
        .rewrite(&mut Budget::new(1), &saxpy_input())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("coder model `test-model`: the model endpoint {}/chat/completions still answered 429 (rate limited) after 2 retries; wait a minute, or lower `llm.callsPerStep`", server.url())
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn server_errors_retry_then_fail_and_4xx_does_not_retry() {
    // Anthropic's 529 overloaded is a 5xx: retried, then answered.
    let server = ReplayServer::start(vec![
        Scripted::fixture("anthropic_overloaded.json"),
        Scripted::fixture("anthropic_strategy.json"),
    ]);
    let s = model(Provider::Anthropic, &server.url(), ANTHROPIC_KEY_VAR);
    strategist(&s)
        .propose(&mut Budget::new(1), &strategy_input(), &catalog())
        .await
        .unwrap();
    assert_eq!(server.requests().len(), 2);

    let boom = Scripted::text(500, "internal error:\nmodel crashed");
    let server = ReplayServer::start(vec![boom.clone(), boom.clone(), boom]);
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    let err = coder(&s)
        .rewrite(&mut Budget::new(1), &saxpy_input())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("coder model `test-model`: the model endpoint {}/chat/completions answered HTTP 500: internal error: model crashed", server.url())
    );
    assert_eq!(server.requests().len(), 3);

    let server = ReplayServer::start(vec![Scripted::json(
        404,
        &json!({"error": {"message": "model 'test-model' not found"}}),
    )]);
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    let err = coder(&s)
        .rewrite(&mut Budget::new(1), &saxpy_input())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            r#"coder model `test-model`: the model endpoint {}/chat/completions answered HTTP 404 (check `url` and `model`): {{"error":{{"message":"model 'test-model' not found"}}}}"#,
            server.url()
        )
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_body_that_is_not_the_wire_format() {
    let server = ReplayServer::start(vec![Scripted::text(200, "<html>proxy login</html>")]);
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    let err = coder(&s)
        .rewrite(&mut Budget::new(1), &saxpy_input())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            r#"coder model `test-model`: the answer from {}/chat/completions is not OpenAI chat-completion JSON: the body does not parse as JSON (expected value at line 1 column 1); it starts "<html>proxy login</html>""#,
            server.url()
        )
    );
}

#[tokio::test]
async fn the_key_does_not_follow_a_redirect() {
    let elsewhere = ReplayServer::start(vec![Scripted::fixture("openai_saxpy_coder.json")]);
    let server = ReplayServer::start(vec![Scripted::text(307, "")
        .header("Location", &format!("{}/chat/completions", elsewhere.url()))]);
    let s = model(Provider::OpenAi, &server.url(), OPENAI_KEY_VAR);
    let err = coder(&s)
        .rewrite(&mut Budget::new(1), &saxpy_input())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("answered HTTP 307"), "{err}");
    assert_eq!(elsewhere.requests().len(), 0);
}

/// Every bad answer a coder model can give, through the real client.
#[tokio::test]
async fn bad_coder_replies_are_reply_errors_with_the_raw_text() {
    let replies = [
        "Sure! Adding __restrict__ to x and y will help the compiler.",
        "```cuda\n```",
        "```cuda\n__device__ float f(float v) { return v; }\n```\n```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {}\n```",
        "```cuda\n__global__ void daxpy(int n, double a, const double* x, double* y) {}\n```",
        "```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {\n    int i = blockIdx.x",
        "```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {\n    y[0] = ;\n}\n```",
        "```cuda\nextern \"C\" __global__ void saxpy(float a, int n, const float* x, float* y) {}\n```",
    ];
    let server = ReplayServer::start(replies.iter().map(|r| Scripted::openai(r)).collect());
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    let c = coder(&s);
    let mut budget = Budget::new(replies.len() as u32);
    let mut messages = Vec::new();
    for raw in replies {
        let err = c.rewrite(&mut budget, &saxpy_input()).await.unwrap_err();
        assert!(matches!(err, LlmStepError::Reply { .. }), "{err}");
        assert_eq!(err.raw_reply(), Some(raw));
        messages.push(err.to_string());
    }
    expect![[r#"
        coder model `test-model`: the reply has no fenced code block; it starts: "Sure! Adding __restrict__ to x and y will help the compiler."
        coder model `test-model`: the code block is empty; it must hold the complete kernel unit
        coder model `test-model`: the reply has 2 fenced code blocks (at reply lines 1, 4); answer with exactly one
        coder model `test-model`: the code block does not define the kernel `saxpy`; it defines `daxpy`
        coder model `test-model`: the code block opened at reply line 1 is never closed (was the reply cut off at maxTokens?)
        coder model `test-model`: the code does not parse: line 2, column 10 of the block: syntax error: unexpected `=`
        coder model `test-model`: the kernel `saxpy` takes (a, n, x, y) but must take (n, a, x, y), the same names in the same order"#]]
    .assert_eq(&messages.join("\n"));
}

#[tokio::test]
async fn a_repair_round_sends_the_attempt_and_the_failure() {
    let wrong = "```cuda\nextern \"C\" __global__ void saxpy(float a, int n, const float* x, float* y) {}\n```";
    let server = ReplayServer::start(vec![
        Scripted::openai(wrong),
        Scripted::fixture("openai_saxpy_coder.json"),
    ]);
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    let c = coder(&s);
    let mut budget = Budget::new(2);
    let input = saxpy_input();
    let err = c.rewrite(&mut budget, &input).await.unwrap_err();
    let LlmStepError::Reply { source, raw, .. } = &err else {
        panic!("{err}")
    };
    assert!(matches!(source, ReplyError::ParamsDiffer { .. }));
    let unit = c
        .repair(&mut budget, &input, raw, &source.to_string())
        .await
        .unwrap();
    assert!(unit.unit.contains("__restrict__"));
    let reqs = server.requests();
    let user = reqs[1].body["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.contains(&format!("## Your previous attempt\n```\n{wrong}\n```")),
        "{user}"
    );
    assert!(user.contains("## Why it was rejected\nthe kernel `saxpy` takes (a, n, x, y) but must take (n, a, x, y)"), "{user}");
    assert!(reqs[1].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("that attempt was rejected"));
}

#[tokio::test]
async fn bad_strategy_replies() {
    let server = ReplayServer::start(vec![
        Scripted::anthropic("```json\n{\"id\": \"restrict_const\", \"params\": {\n```"),
        Scripted::anthropic(
            "```json\n{\"id\": \"tensor_cores\", \"params\": {}, \"rationale\": \"matmul\"}\n```",
        ),
        Scripted::anthropic("I would try vectorized loads."),
    ]);
    let s = model(Provider::Anthropic, &server.url(), ANTHROPIC_KEY_VAR);
    let st = strategist(&s);
    let mut budget = Budget::new(3);
    let mut messages = Vec::new();
    for _ in 0..3 {
        let err = st
            .propose(&mut budget, &strategy_input(), &catalog())
            .await
            .unwrap_err();
        assert!(err.raw_reply().is_some());
        messages.push(err.to_string());
    }
    expect![[r#"
        strategy model `test-model`: the strategy reply is not valid JSON: EOF while parsing an object at line 1 column 36
        strategy model `test-model`: `tensor_cores` is not a step of the catalog; use one of `restrict_const`, `launch_bounds`, or `free`
        strategy model `test-model`: the reply has no JSON object (no fenced json block, and the reply is not JSON); it starts: "I would try vectorized loads.""#]]
    .assert_eq(&messages.join("\n"));
}

#[tokio::test]
async fn the_budget_stops_calls_before_they_are_made() {
    let server = ReplayServer::start(vec![
        Scripted::fixture("openai_saxpy_coder.json"),
        Scripted::fixture("openai_saxpy_coder.json"),
        Scripted::fixture("openai_saxpy_coder.json"),
    ]);
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    let c = coder(&s);
    let mut budget = Budget::new(2);
    c.rewrite(&mut budget, &saxpy_input()).await.unwrap();
    c.rewrite(&mut budget, &saxpy_input()).await.unwrap();
    let err = c.rewrite(&mut budget, &saxpy_input()).await.unwrap_err();
    assert!(err.is_budget_exhausted());
    expect!["coder model `test-model`: this step's budget of 2 model calls is spent; raise `llm.callsPerStep` to allow more"]
        .assert_eq(&err.to_string());
    assert_eq!(server.requests().len(), 2);
    assert_eq!(server.remaining(), 1);
}

#[tokio::test]
async fn prompt_folder_overrides_and_bad_placeholders() {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-prompts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("coder.md"),
        "<!-- my coder -->\n# system\nYou write CUDA.\n# user\nKernel:\n{{kernel_unit}}\nDo: {{step}}\n",
    )
    .unwrap();
    let prompts = Prompts::load(Some(&dir)).unwrap();
    let server = ReplayServer::start(vec![Scripted::fixture("openai_saxpy_coder.json")]);
    let s = model(Provider::OpenAi, &server.url(), UNSET_VAR);
    let c = LlmCoder {
        client: client(&s),
        prompts,
    };
    let input = saxpy_input();
    c.rewrite(&mut Budget::new(1), &input).await.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(body["messages"][0]["content"], "You write CUDA.");
    assert_eq!(
        body["messages"][1]["content"],
        format!("Kernel:\n{}\nDo: {}", input.kernel_unit, input.step)
    );

    std::fs::write(
        dir.join("strategy.md"),
        "# system\nPick.\n# user\n{{kernel_unit}}\n{{catalog}}\n{{speedup}}\n",
    )
    .unwrap();
    let err = Prompts::load(Some(&dir)).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        err,
        format!("{}:6: unknown placeholder `{{{{speedup}}}}`; strategy.md knows kernel_name, lang, kernel_unit, spec, facts, device, timing, history, catalog, profile", dir.join("strategy.md").display())
    );
}
