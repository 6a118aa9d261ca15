// Records what the Vercel AI SDK's telemetry exports when a call is retried or falls back.
//
// Run through the Python recorder, which serves the fake provider and the OTLP capture endpoint
// on 127.0.0.1, hands their URLs over in FAKE_BASE_URL and OTLP_TRACES_URL, and writes the
// fixture and its truth file:
//
//     (cd examples/vercel && npm ci)
//     /tmp/rec-venv/bin/python examples/record_instrumentations.py --library vercel
//
// Shapes (argv[2]):
//   generate-retries  generateText, maxRetries=2: the provider answers 429, 500, then 200;
//   fallback          two generateText calls under one application span: deepseek-v4-pro fails
//                     (500, maxRetries=0), then glm-5 answers;
//   stream-retry      streamText, maxRetries=2: 429, then a streamed 200.
// ai 7 needs Node 22; on Node 20 npm resolves ai 6 (package-lock.json has the versions used).

import { trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText } from "ai";

const shape = process.argv[2];
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "support-bot" }),
  spanProcessors: [
    new BatchSpanProcessor(new OTLPTraceExporter({ url: process.env.OTLP_TRACES_URL })),
  ],
});
provider.register();
const tracer = trace.getTracer("support-bot");

const aiwave = createOpenAICompatible({
  name: "aiwave",
  baseURL: process.env.FAKE_BASE_URL,
  apiKey: "fake",
  includeUsage: true,
});
const telemetry = { isEnabled: true, functionId: "summarise-ticket" };
const prompt = "Summarise this support ticket.";

await tracer.startActiveSpan("handle_ticket", async (span) => {
  try {
    if (shape === "generate-retries") {
      await generateText({
        model: aiwave("glm-5"), prompt, maxOutputTokens: 800, maxRetries: 2,
        experimental_telemetry: telemetry,
      });
    } else if (shape === "fallback") {
      for (const [model, maxRetries] of [["deepseek-v4-pro", 0], ["glm-5", 0]]) {
        try {
          await generateText({
            model: aiwave(model), prompt, maxOutputTokens: 800, maxRetries,
            experimental_telemetry: telemetry,
          });
          break;
        } catch (error) {
          if (model === "glm-5") throw error;
        }
      }
    } else if (shape === "stream-retry") {
      const result = streamText({
        model: aiwave("kimi-k2.6"), prompt, maxOutputTokens: 800, maxRetries: 2,
        experimental_telemetry: telemetry,
        onError: ({ error }) => console.error("stream error", error?.message),
      });
      await result.text;
    } else {
      throw new Error(`unknown shape ${shape}`);
    }
  } finally {
    span.end();
  }
});
await provider.forceFlush();
await provider.shutdown();
