//! A seeded generator of random traces in the shapes of "Attempts inferred from plain
//! instrumentation" (SPEC §2): an application's root span with children; model spans with HTTP
//! tries below them or beside them (with and without a matching `server.address` or `url.full`),
//! or a resend count; nests of model spans, some through a span that is not one; two
//! instrumentations of one call; Vercel AI SDK call spans around their tries; runs of failed
//! calls and agent loops of successes under one parent; declared attempts below a model span;
//! failed calls without usage; cached and cache-write counts; envelopes as JSON. Then the same
//! spans as OTLP JSON lines for `replay`, or as exports in any order and split for `serve`.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use retry_spend_collector::contract::otlp_json::parse_request;
use serde_json::{json, Value};

use super::spans::{boolean, hex_id, int, s, Rng, BASE_NANOS, PRICING_SOURCE, PRICING_VERSION};

const MODELS: [&str; 4] = ["glm-5", "deepseek-v4-pro", "deepseek-v4-flash", "kimi-k2.6"];
const SERVICES: [&str; 2] = ["support-bot", "code-agent"];
const MILLI: u64 = 1_000_000;
const HOST: &str = "api.aiwave.live";
const OTHER_HOST: &str = "search.internal";
const FAILED_STATUSES: [i64; 4] = [429, 500, 503, 529];

/// Instrumentation scopes, so that two instrumentations of one call sit in scopes of their own.
const APP: &str = "app";
const OPENAI: &str = "opentelemetry.instrumentation.openai_v2";
const HTTPX: &str = "opentelemetry.instrumentation.httpx";
const ANTHROPIC_SDK: &str = "anthropic";
const OPENLLMETRY: &str = "opentelemetry.instrumentation.anthropic";
const PYDANTIC: &str = "pydantic-ai";
const VERCEL: &str = "ai";

/// One span and where it was emitted from.
#[derive(Debug, Clone)]
pub struct PlainSpan {
    pub service: &'static str,
    pub scope: &'static str,
    pub json: Value,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Internal,
    Server,
    Client,
}

struct Spec {
    id: String,
    parent: Option<String>,
    name: String,
    kind: Kind,
    scope: &'static str,
    start: u64,
    end: u64,
    failed: bool,
    attributes: Vec<Value>,
}

/// Where a try names its server.
#[derive(Clone, Copy)]
enum Host {
    Address(&'static str),
    Url(&'static str),
    Neither,
}

/// What an element of a parent's children ended as: when, and whether it failed.
struct Element {
    end: u64,
    failed: bool,
}

struct Gen {
    rng: Rng,
    trace: String,
    service: &'static str,
    spans: Vec<PlainSpan>,
}

/// The spans of `traces` random traces, in the order they were made. (`Rng` sets the seed's
/// lowest bit, so each seed is doubled to keep seeds apart.)
pub fn spans(seed: u64, traces: u64) -> Vec<PlainSpan> {
    let mut gen = Gen {
        rng: Rng::new(2 * seed),
        trace: String::new(),
        service: SERVICES[0],
        spans: Vec::new(),
    };
    for number in 0..traces {
        gen.trace(BASE_NANOS + number * 120 * super::spans::SECOND);
    }
    gen.spans
}

impl Gen {
    fn id(&mut self) -> String {
        hex_id(&mut self.rng, 8)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        self.rng.pick(items)
    }

    /// A duration between `min` and `max` milliseconds, with untruncated nanoseconds.
    fn millis(&mut self, min: u64, max: u64) -> u64 {
        (min + self.rng.below(max - min + 1)) * MILLI + self.rng.below(MILLI)
    }

    fn push(&mut self, spec: Spec) {
        let kind = match (spec.kind, self.rng.chance(50)) {
            (Kind::Client, true) => json!("SPAN_KIND_CLIENT"),
            (Kind::Client, false) => json!(3),
            (Kind::Server, true) => json!("SPAN_KIND_SERVER"),
            (Kind::Server, false) => json!(2),
            (Kind::Internal, true) => json!("SPAN_KIND_INTERNAL"),
            (Kind::Internal, false) => json!(1),
        };
        let mut span = json!({
            "traceId": self.trace,
            "spanId": spec.id,
            "name": spec.name,
            "kind": kind,
            "startTimeUnixNano": spec.start.to_string(),
            "endTimeUnixNano": spec.end.to_string(),
            "attributes": spec.attributes,
        });
        if let Some(parent) = spec.parent {
            span["parentSpanId"] = json!(parent);
        }
        if spec.failed {
            span["status"] = json!({"code": "STATUS_CODE_ERROR", "message": "upstream error"});
        } else if self.rng.chance(30) {
            span["status"] = json!({"code": 1});
        }
        self.spans.push(PlainSpan {
            service: self.service,
            scope: spec.scope,
            json: span,
        });
    }

    fn trace(&mut self, start: u64) {
        self.trace = hex_id(&mut self.rng, 16);
        self.service = self.pick(&SERVICES);
        match self.rng.below(10) {
            // A model call or a Vercel call as the trace's root: no runs, no tries beside it.
            0 => {
                self.plain_call(None, start);
            }
            1 => {
                self.vercel(None, start);
            }
            _ => {
                let root = self.id();
                let first = start + self.millis(1, 20);
                let end = self.children(&root, first, 2) + self.millis(1, 20);
                let failed = self.rng.chance(5);
                self.push(Spec {
                    id: root,
                    parent: None,
                    name: "POST /chat".into(),
                    kind: Kind::Server,
                    scope: APP,
                    start,
                    end,
                    failed,
                    attributes: vec![s("http.request.method", "POST"), s("http.route", "/chat")],
                });
            }
        }
    }

    /// A few elements one after the other (sometimes overlapping) under `parent`; returns when
    /// the last ended. `depth` bounds how deep application steps nest.
    fn children(&mut self, parent: &str, start: u64, depth: u32) -> u64 {
        let mut at = start;
        let mut end = start;
        for _ in 0..1 + self.rng.below(6) {
            let element = self.element(parent, at, depth);
            end = end.max(element.end);
            at = if self.rng.chance(10) {
                at + self.millis(0, 100)
            } else {
                element.end + self.millis(0, 30)
            };
        }
        end
    }

    fn element(&mut self, parent: &str, start: u64, depth: u32) -> Element {
        let within = Some(parent);
        match self.rng.below(100) {
            0..=29 => self.plain_call(within, start),
            30..=39 => self.retry_loop(parent, start),
            40..=49 => self.nest(within, start),
            50..=59 => self.duplicate(within, start),
            60..=71 => self.vercel(within, start),
            72..=79 => self.declared(within, start),
            80..=91 => self.ordinary(within, start),
            _ if depth > 0 => {
                let id = self.id();
                let first = start + self.millis(0, 5);
                let end = self.children(&id, first, depth - 1);
                self.push(Spec {
                    id,
                    parent: Some(parent.to_owned()),
                    name: "agent step".into(),
                    kind: Kind::Internal,
                    scope: APP,
                    start,
                    end,
                    failed: false,
                    attributes: vec![s("step", "plan")],
                });
                Element { end, failed: false }
            }
            _ => self.plain_call(within, start),
        }
    }

    /// An application's retry loop: failed calls, then a success, one after the other.
    fn retry_loop(&mut self, parent: &str, start: u64) -> Element {
        let mut at = start;
        let mut last = None;
        for _ in 0..2 + self.rng.below(3) {
            let element = self.plain_call(Some(parent), at);
            at = element.end + self.millis(0, 30);
            let failed = element.failed;
            last = Some(element);
            if !failed {
                break;
            }
        }
        last.unwrap()
    }

    fn model_attributes(&mut self, model: &str, operation: Option<&str>) -> Vec<Value> {
        let mut attributes = vec![s("gen_ai.request.model", model)];
        if let Some(operation) = operation {
            attributes.push(s("gen_ai.operation.name", operation));
        }
        if self.rng.chance(80) {
            attributes.push(s("gen_ai.provider.name", "aiwave"));
        }
        if self.rng.chance(75) {
            let cap = self.pick(&[256, 800, 2048]);
            attributes.push(int(&mut self.rng, "gen_ai.request.max_tokens", cap));
        }
        if self.rng.chance(25) {
            attributes.push(self.envelope());
        }
        attributes
    }

    /// A policy-free envelope as the `retry_spend.envelope` JSON attribute.
    fn envelope(&mut self) -> Value {
        let policy = json!({
            "pricing_source": PRICING_SOURCE,
            "pricing_checked_at": "2026-08-22",
            "pricing_version": PRICING_VERSION,
            "billing_group": self.pick(&["default", "vip"]),
            "max_incremental_usd": self.pick(&[0.002, 0.01, 0.05]),
            "max_attempts_after_first": self.rng.below(3),
            "allow_family_fallback": self.rng.chance(50),
            "allowed_fallback_families": ["deepseek", "glm"],
            "task_type": "support_summary",
        });
        let text = if self.rng.chance(50) {
            json!({ "retry_spend_envelope": policy })
        } else {
            policy
        };
        s("retry_spend.envelope", &text.to_string())
    }

    /// Usage attributes: a failed call mostly reports none; some counts are cached or written
    /// to the provider's cache.
    fn usage(&mut self, failed: bool) -> Vec<Value> {
        if failed && self.rng.chance(75) {
            return Vec::new();
        }
        let input = 1_000 + 500 * self.rng.below(30) as i64;
        let mut attributes = vec![int(&mut self.rng, "gen_ai.usage.input_tokens", input)];
        if self.rng.chance(40) {
            let cached = input / 2 - 100 * self.rng.below(5) as i64;
            attributes.push(int(
                &mut self.rng,
                "gen_ai.usage.cache_read.input_tokens",
                cached,
            ));
        }
        if self.rng.chance(25) {
            let written = input / 4;
            attributes.push(int(
                &mut self.rng,
                "gen_ai.usage.cache_creation.input_tokens",
                written,
            ));
        }
        if !failed {
            let output = 50 + self.rng.below(700) as i64;
            attributes.push(int(&mut self.rng, "gen_ai.usage.output_tokens", output));
        }
        attributes
    }

    fn failure(&mut self, failed: bool) -> Vec<Value> {
        if failed && self.rng.chance(50) {
            vec![s(
                "error.type",
                self.pick(&["rate_limited", "timeout", "server_error"]),
            )]
        } else {
            Vec::new()
        }
    }

    fn host(&mut self) -> Host {
        match self.rng.below(20) {
            0..=11 => Host::Address(HOST),
            12..=14 => Host::Url(HOST),
            15..=16 => Host::Address(OTHER_HOST),
            _ => Host::Neither,
        }
    }

    /// An HTTP client try.
    #[allow(clippy::too_many_arguments)]
    fn http_try(
        &mut self,
        parent: Option<&str>,
        start: u64,
        end: u64,
        status: i64,
        host: Host,
        resend: Option<i64>,
    ) {
        let mut attributes = vec![
            s("http.request.method", "POST"),
            int(&mut self.rng, "http.response.status_code", status),
        ];
        match host {
            Host::Address(host) => attributes.push(s("server.address", host)),
            Host::Url(host) => attributes.push(s(
                "url.full",
                &format!("https://{host}/v1/chat/completions"),
            )),
            Host::Neither => {}
        }
        if let Some(resend) = resend {
            attributes.push(int(&mut self.rng, "http.request.resend_count", resend));
        }
        let failed = status >= 400 && self.rng.chance(60);
        if failed && self.rng.chance(30) {
            attributes.push(s("error.type", &status.to_string()));
        }
        let id = self.id();
        self.push(Spec {
            id,
            parent: parent.map(str::to_owned),
            name: "POST".into(),
            kind: Kind::Client,
            scope: HTTPX,
            start,
            end,
            failed,
            attributes,
        });
    }

    /// `count` tries one after the other in [start, end]: all but the last failed, the last
    /// failed too when the call did.
    fn tries(
        &mut self,
        parent: Option<&str>,
        start: u64,
        end: u64,
        count: u64,
        call_failed: bool,
        resend_counts: bool,
    ) {
        let slot = (end - start) / count;
        let host = self.host();
        for i in 0..count {
            let at = start + i * slot + self.rng.below(slot / 4 + 1);
            let status = if i + 1 < count || (call_failed && self.rng.chance(70)) {
                self.pick(&FAILED_STATUSES)
            } else {
                200
            };
            // Mostly one client for all of a call's tries; sometimes one names another host.
            let host = if self.rng.chance(10) {
                self.host()
            } else {
                host
            };
            let resend = (resend_counts && (i > 0 || self.rng.chance(30))).then_some(i as i64);
            self.http_try(parent, at, at + slot / 2, status, host, resend);
        }
    }

    /// A model span, with its tries below it, beside it, or counted in `resend_count`.
    fn plain_call(&mut self, parent: Option<&str>, start: u64) -> Element {
        let model = self.pick(&MODELS);
        let operation = self.pick(&[Some("chat"), Some("chat"), None]);
        let failed = self.rng.chance(40);
        let end = start + self.millis(200, 3_000);
        let id = self.id();
        let mut attributes = self.model_attributes(model, operation);
        attributes.extend(self.usage(failed));
        attributes.extend(self.failure(failed));
        let count = 1 + self.rng.below(3);
        match self.rng.below(6) {
            0 => {}
            1 | 2 => {
                let java = self.rng.chance(30);
                self.tries(Some(&id), start + 1, end, count, failed, java);
            }
            3 | 4 => {
                match self.rng.below(3) {
                    0 => attributes.push(s("server.address", HOST)),
                    1 => attributes.push(s("url.full", &format!("https://{HOST}/v1/messages"))),
                    _ => {}
                }
                // Some tries start on the window's edges, or just outside it.
                let (from, to) = match self.rng.below(6) {
                    0 => (start, end),
                    1 => (start - 3 * MILLI, end),
                    2 => (start, end + 50 * MILLI),
                    _ => (start + MILLI, end - MILLI),
                };
                self.tries(parent, from, to, count, failed, false);
            }
            _ => {
                let resends = 1 + self.rng.below(3) as i64;
                attributes.push(int(&mut self.rng, "http.request.resend_count", resends));
            }
        }
        self.push(Spec {
            id,
            parent: parent.map(str::to_owned),
            name: format!("chat {model}"),
            kind: Kind::Client,
            scope: OPENAI,
            start,
            end,
            failed,
            attributes,
        });
        Element { end, failed }
    }

    /// A framework's model span around an SDK's, sometimes through a span that is not one.
    fn nest(&mut self, parent: Option<&str>, start: u64) -> Element {
        let model = self.pick(&MODELS);
        let outer = self.id();
        let end = start + self.millis(500, 4_000);
        let holder = if self.rng.chance(40) {
            let id = self.id();
            self.push(Spec {
                id: id.clone(),
                parent: Some(outer.clone()),
                name: "model request".into(),
                kind: Kind::Internal,
                scope: PYDANTIC,
                start: start + 10,
                end: end - 10,
                failed: false,
                attributes: vec![s("logfire.msg", "model request")],
            });
            id
        } else {
            outer.clone()
        };
        let inners = 1 + self.rng.below(3);
        let slot = (end - start - 40) / inners;
        let mut failed = false;
        let usage_inside = self.rng.chance(60);
        for i in 0..inners {
            let inner_model = if self.rng.chance(15) {
                self.pick(&MODELS)
            } else {
                model
            };
            failed = i + 1 < inners || self.rng.chance(30);
            let from = start + 20 + i * slot;
            let to = from + slot - self.millis(0, 5).min(slot / 2);
            let id = self.id();
            let operation = self.pick(&[Some("chat"), None]);
            let mut attributes = self.model_attributes(inner_model, operation);
            if usage_inside {
                attributes.extend(self.usage(failed));
            }
            attributes.extend(self.failure(failed));
            if self.rng.chance(40) {
                let count = 1 + self.rng.below(2);
                self.tries(Some(&id), from + 1, to, count, failed, false);
            }
            if self.rng.chance(10) {
                attributes.push(int(&mut self.rng, "http.request.resend_count", 1));
            }
            self.push(Spec {
                id,
                parent: Some(holder.clone()),
                name: format!("model request attempt {inner_model}"),
                kind: Kind::Client,
                scope: OPENAI,
                start: from,
                end: to,
                failed,
                attributes,
            });
        }
        let failed = failed || self.rng.chance(10);
        let mut attributes = self.model_attributes(model, Some("chat"));
        if !usage_inside || self.rng.chance(30) {
            attributes.extend(self.usage(failed));
        }
        self.push(Spec {
            id: outer,
            parent: parent.map(str::to_owned),
            name: format!("chat {model}"),
            kind: Kind::Internal,
            scope: PYDANTIC,
            start,
            end,
            failed,
            attributes,
        });
        Element { end, failed }
    }

    /// Two instrumentations of one call: the SDK's own tracing and OpenLLMetry's, sibling model
    /// spans of one model with overlapping windows.
    fn duplicate(&mut self, parent: Option<&str>, start: u64) -> Element {
        let model = self.pick(&MODELS);
        let failed = self.rng.chance(40);
        let end = start + self.millis(300, 3_000);
        let (a, b) = (self.id(), self.id());
        let b_start = start + self.millis(0, 3);
        let b_end = if self.rng.chance(50) {
            end - self.millis(0, 3)
        } else {
            end + self.millis(0, 3)
        };
        let b_model = if self.rng.chance(10) {
            self.pick(&MODELS)
        } else {
            model
        };
        let b_failed = if self.rng.chance(85) { failed } else { !failed };
        let mut sdk = self.model_attributes(model, Some("chat"));
        let usage = self.usage(failed);
        sdk.extend(usage.clone());
        sdk.extend(self.failure(failed));
        let mut openllmetry = self.model_attributes(b_model, Some("chat"));
        if self.rng.chance(70) {
            openllmetry.extend(usage);
        }
        match self.rng.below(4) {
            0 => {
                let resends = 1 + self.rng.below(2) as i64;
                sdk.push(int(&mut self.rng, "http.request.resend_count", resends));
            }
            1 => {
                openllmetry.push(s("server.address", HOST));
                let count = 1 + self.rng.below(3);
                self.tries(parent, b_start + 1, b_end.min(end), count, failed, false);
            }
            2 => {
                let count = 1 + self.rng.below(3);
                self.tries(Some(&b), b_start + 1, b_end, count, failed, false);
            }
            _ => {}
        }
        self.push(Spec {
            id: a,
            parent: parent.map(str::to_owned),
            name: format!("anthropic.messages.create {model}"),
            kind: Kind::Client,
            scope: ANTHROPIC_SDK,
            start,
            end,
            failed,
            attributes: sdk,
        });
        self.push(Spec {
            id: b,
            parent: parent.map(str::to_owned),
            name: "anthropic.chat".into(),
            kind: Kind::Client,
            scope: OPENLLMETRY,
            start: b_start,
            end: b_end,
            failed: b_failed,
            attributes: openllmetry,
        });
        Element {
            end: end.max(b_end),
            failed,
        }
    }

    /// The Vercel AI SDK: an `ai.generateText` call span whose tries are `doGenerate` model
    /// spans without an operation name; a multi-step call's steps follow one another.
    fn vercel(&mut self, parent: Option<&str>, start: u64) -> Element {
        let model = self.pick(&MODELS);
        let call = self.id();
        let mut at = start + self.millis(1, 5);
        let mut failed = false;
        let steps = if self.rng.chance(5) {
            0
        } else {
            1 + self.rng.below(4)
        };
        for _ in 0..steps {
            failed = self.rng.chance(45);
            let end = at + self.millis(100, 1_500);
            let mut attributes = vec![
                s("ai.operationId", "ai.generateText.doGenerate"),
                s("gen_ai.request.model", model),
                s("gen_ai.system", "aiwave"),
            ];
            if self.rng.chance(50) {
                let cap = self.pick(&[512, 1024]);
                attributes.push(int(&mut self.rng, "gen_ai.request.max_tokens", cap));
            }
            if !failed || self.rng.chance(20) {
                let input = 800 + 100 * self.rng.below(40) as i64;
                attributes.push(int(&mut self.rng, "gen_ai.usage.input_tokens", input));
                if self.rng.chance(40) {
                    attributes.push(int(&mut self.rng, "ai.usage.cachedInputTokens", input / 3));
                }
                if !failed {
                    let output = 20 + self.rng.below(400) as i64;
                    attributes.push(int(&mut self.rng, "gen_ai.usage.output_tokens", output));
                }
            }
            let id = self.id();
            self.push(Spec {
                id,
                parent: Some(call.clone()),
                name: "ai.generateText.doGenerate".into(),
                kind: Kind::Client,
                scope: VERCEL,
                start: at,
                end,
                failed,
                attributes,
            });
            at = end + self.millis(0, 20);
        }
        let end = at + self.millis(1, 5);
        let mut attributes = vec![
            s("ai.operationId", "ai.generateText"),
            s("ai.model.id", model),
        ];
        if self.rng.chance(20) {
            attributes.push(self.envelope());
        }
        self.push(Spec {
            id: call,
            parent: parent.map(str::to_owned),
            name: "ai.generateText".into(),
            kind: Kind::Internal,
            scope: VERCEL,
            start,
            end,
            failed,
            attributes,
        });
        Element { end, failed }
    }

    /// A framework's model span around an SDK that declares its attempts: the declared spans
    /// make the rows, the model span none.
    fn declared(&mut self, parent: Option<&str>, start: u64) -> Element {
        let model = self.pick(&MODELS);
        let outer = self.id();
        let end = start + self.millis(500, 4_000);
        let request_id = format!("req-{outer}");
        let by_request_id = self.rng.chance(50);
        let logical = if self.rng.chance(60) {
            let id = self.id();
            let mut attributes = vec![s("retry_spend.span.role", "logical_request")];
            if by_request_id {
                attributes.push(s("retry_spend.request.id", &request_id));
            }
            attributes.push(s("retry_spend.pricing.source", PRICING_SOURCE));
            attributes.push(s("retry_spend.pricing.checked_at", "2026-08-22"));
            attributes.push(s("retry_spend.pricing.version", PRICING_VERSION));
            attributes.push(s("retry_spend.billing_group", "default"));
            self.push(Spec {
                id: id.clone(),
                parent: Some(outer.clone()),
                name: "retry_spend.request".into(),
                kind: Kind::Internal,
                scope: APP,
                start: start + 5,
                end: end - 5,
                failed: false,
                attributes,
            });
            id
        } else {
            outer.clone()
        };
        let attempts = 1 + self.rng.below(3);
        let slot = (end - start - 20) / attempts;
        let mut failed = false;
        for i in 0..attempts {
            failed = i + 1 < attempts;
            let mut attributes = vec![s("retry_spend.span.role", "attempt")];
            if by_request_id {
                attributes.push(s("retry_spend.request.id", &request_id));
            }
            if self.rng.chance(70) {
                attributes.push(int(&mut self.rng, "retry_spend.attempt.index", i as i64));
            }
            attributes.extend(self.model_attributes(model, Some("chat")));
            attributes.extend(self.usage(failed));
            attributes.extend(self.failure(failed));
            let from = start + 10 + i * slot;
            let id = self.id();
            self.push(Spec {
                id,
                parent: Some(logical.clone()),
                name: format!("attempt {i}"),
                kind: Kind::Client,
                scope: APP,
                start: from,
                end: from + slot - 1,
                failed,
                attributes,
            });
        }
        let mut attributes = self.model_attributes(model, Some("chat"));
        attributes.extend(self.usage(failed));
        self.push(Spec {
            id: outer,
            parent: parent.map(str::to_owned),
            name: format!("chat {model}"),
            kind: Kind::Internal,
            scope: PYDANTIC,
            start,
            end,
            failed,
            attributes,
        });
        Element { end, failed }
    }

    /// Spans that are no call: a tool (a GenAI span, sometimes naming a model), a database
    /// query, an HTTP request to another service.
    fn ordinary(&mut self, parent: Option<&str>, start: u64) -> Element {
        let end = start + self.millis(5, 300);
        let failed = self.rng.chance(20);
        let (name, kind, attributes) = match self.rng.below(3) {
            0 => {
                let mut attributes = vec![
                    s("gen_ai.operation.name", "execute_tool"),
                    s("gen_ai.tool.name", "search"),
                ];
                if self.rng.chance(50) {
                    attributes.push(s("gen_ai.request.model", self.pick(&MODELS)));
                }
                ("execute_tool search", Kind::Internal, attributes)
            }
            1 => (
                "SELECT orders",
                Kind::Client,
                vec![s("db.system", "postgresql")],
            ),
            _ => (
                "GET",
                Kind::Client,
                vec![
                    s("http.request.method", "GET"),
                    s("server.address", OTHER_HOST),
                    json!({"key": "http.response.status_code", "value": {"intValue": "200"}}),
                ],
            ),
        };
        let id = self.id();
        let mut attributes = attributes;
        if self.rng.chance(5) {
            attributes.push(boolean("cache.hit", true));
        }
        self.push(Spec {
            id,
            parent: parent.map(str::to_owned),
            name: name.into(),
            kind,
            scope: APP,
            start,
            end,
            failed,
            attributes,
        });
        Element { end, failed }
    }
}

/// A resource's spans by scope name.
type Scopes<'a> = Vec<(&'a str, Vec<&'a Value>)>;

/// One ExportTraceServiceRequest as an OTLP JSON line: spans grouped by service, then scope.
pub fn line(spans: &[&PlainSpan]) -> String {
    let mut resources: Vec<(&str, Scopes)> = Vec::new();
    for span in spans {
        let index = match resources.iter().position(|(s, _)| *s == span.service) {
            Some(i) => i,
            None => {
                resources.push((span.service, Vec::new()));
                resources.len() - 1
            }
        };
        let scopes = &mut resources[index].1;
        match scopes.iter_mut().find(|(s, _)| *s == span.scope) {
            Some((_, list)) => list.push(&span.json),
            None => scopes.push((span.scope, vec![&span.json])),
        }
    }
    let resource_spans: Vec<Value> = resources
        .into_iter()
        .map(|(service, scopes)| {
            let scope_spans: Vec<Value> = scopes
                .into_iter()
                .map(|(scope, spans)| json!({"scope": {"name": scope, "version": "1.0.0"}, "spans": spans}))
                .collect();
            json!({
                "resource": {"attributes": [s("service.name", service)]},
                "scopeSpans": scope_spans,
            })
        })
        .collect();
    json!({ "resourceSpans": resource_spans }).to_string()
}

fn shuffled<'a>(spans: &'a [PlainSpan], rng: &mut Rng) -> Vec<&'a PlainSpan> {
    let mut order: Vec<&PlainSpan> = spans.iter().collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// The spans cut into runs of 1 to `most` spans, in their order.
fn split<'a>(spans: &[&'a PlainSpan], most: u64, rng: &mut Rng) -> Vec<Vec<&'a PlainSpan>> {
    let mut parts = Vec::new();
    let mut rest = spans;
    while !rest.is_empty() {
        let take = (1 + rng.below(most) as usize).min(rest.len());
        parts.push(rest[..take].to_vec());
        rest = &rest[take..];
    }
    parts
}

/// The spans as OTLP JSON lines in the order made, cut at random.
pub fn jsonl(spans: &[PlainSpan], rng: &mut Rng) -> String {
    let spans: Vec<&PlainSpan> = spans.iter().collect();
    split(&spans, 40, rng)
        .iter()
        .map(|part| line(part) + "\n")
        .collect()
}

fn export(spans: &[&PlainSpan]) -> ExportTraceServiceRequest {
    parse_request(line(spans).as_bytes()).expect("a generated line parses")
}

/// Each span in an export of its own, in a random order.
pub fn one_per_export(spans: &[PlainSpan], rng: &mut Rng) -> Vec<ExportTraceServiceRequest> {
    shuffled(spans, rng)
        .into_iter()
        .map(|span| export(&[span]))
        .collect()
}

/// The spans in a random order cut at random into exports, a few of them sent twice (an
/// exporter's retry).
pub fn random_exports(spans: &[PlainSpan], rng: &mut Rng) -> Vec<ExportTraceServiceRequest> {
    let order = shuffled(spans, rng);
    let mut exports = Vec::new();
    for part in split(&order, 12, rng) {
        let request = export(&part);
        if rng.chance(3) {
            exports.push(request.clone());
        }
        exports.push(request);
    }
    exports
}
