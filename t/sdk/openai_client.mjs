#!/usr/bin/env node

// (C) ngx_dynamo_rl_module developers

// Drives the gateway's request plane with the official OpenAI Node SDK, as
// an RL trainer's rollout workers do; run by t/dynamo_rl_sdk.t.
//
// usage: node openai_client.mjs --base-url http://127.0.0.1:PORT/v1
//            [--attempt-id ID] [--model NAME]
//
// One JSON line per call on stdout:
//
//   {"call": NAME, "ok": true, "status": 200,
//    "attempt_id": <x-dynamo-attempt-id of the raw response>,
//    "x_request_id": <x-request-id of the raw response>,
//    "request_id": <the SDK's own idea of the request id>,
//    "stream": bool, "text": <text, or the concatenated deltas>,
//    "chunks": <stream chunks seen>, "stream_done": <the async iterator
//    completed>, "finish_reason": ...}
//
// and for a call the SDK refused with an APIError:
//
//   {"call": NAME, "ok": false, "status": 409, "error_class": "ConflictError",
//    "api_error": true, "sdk_message": <err.message>,
//    "attempt_id": <x-dynamo-attempt-id of the error response>,
//    "body": <the error body as JSON>, "message": <its "message">}
//
// The SDK reads an OpenAI-shaped {"error": {...}} body; Dynamo's flat
// {"message","type","code"} has no "error" key, so err.error is undefined
// and err.message does not carry the text.  The raw body of a non-2xx
// response is kept by a fetch wrapper (the SDK's documented "fetch"
// option) so that the flat message can still be reported.
//
// maxRetries is 0: generation is not idempotent, and the gateway refuses a
// re-sent attempt id anyway.  The exit status is 0 when every call ran
// (whatever its outcome), 2 on bad usage, 1 on anything unexpected.

import OpenAI from 'openai';

function usage(msg) {
    process.stderr.write(`openai_client.mjs: ${msg}\n`
        + 'usage: node openai_client.mjs --base-url URL [--attempt-id ID]'
        + ' [--model NAME]\n');
    process.exit(2);
}

const opts = { model: 'Qwen/Qwen3-0.6B' };
const argv = process.argv.slice(2);

while (argv.length) {
    const arg = argv.shift();
    const val = argv.shift();

    if (val === undefined) {
        usage(`${arg} needs a value`);
    }

    if (arg === '--base-url') {
        opts.baseURL = val;
    } else if (arg === '--attempt-id') {
        opts.attemptId = val;
    } else if (arg === '--model') {
        opts.model = val;
    } else {
        usage(`unknown option ${arg}`);
    }
}

if (!opts.baseURL) {
    usage('--base-url is required');
}

opts.attemptId ??= `sdk-${process.pid}-${Date.now()}`;

// the raw body of the last non-2xx response, before the SDK consumes it

let lastErrorBody = null;

async function keepErrorBody(url, init) {
    const res = await fetch(url, init);

    if (!res.ok) {
        lastErrorBody = await res.clone().text();
    }

    return res;
}

const common = {
    apiKey: 'sk-dummy-not-checked',
    baseURL: opts.baseURL,
    maxRetries: 0,
    timeout: 30 * 1000,
    fetch: keepErrorBody,
};

const client = new OpenAI(common);

// a trainer that names its attempts: the id on every request of this client

const namedClient = new OpenAI({
    ...common,
    defaultHeaders: { 'X-Dynamo-Attempt-Id': opts.attemptId },
});

function print(obj) {
    process.stdout.write(JSON.stringify(obj) + '\n');
}

function raw(call, response, extra) {
    return {
        call,
        ok: true,
        status: response.status,
        attempt_id: response.headers.get('x-dynamo-attempt-id'),
        x_request_id: response.headers.get('x-request-id'),
        content_type: response.headers.get('content-type'),
        ...extra,
    };
}

async function run(call, fn) {
    lastErrorBody = null;

    try {
        print(await fn());

    } catch (err) {
        const out = {
            call,
            ok: false,
            api_error: err instanceof OpenAI.APIError,
            error_class: err?.constructor?.name ?? typeof err,
            status: err?.status ?? null,
            sdk_message: String(err?.message ?? err),
            attempt_id: err?.headers?.get?.('x-dynamo-attempt-id') ?? null,
            body: null,
            message: null,
        };

        if (lastErrorBody !== null) {
            try {
                out.body = JSON.parse(lastErrorBody);
                out.message = out.body?.message ?? null;
            } catch {
                out.body = lastErrorBody;
            }
        }

        print(out);
    }
}

async function drain(stream, pick) {
    let text = '';
    let chunks = 0;
    let finish = null;

    for await (const chunk of stream) {
        chunks++;
        const choice = chunk.choices?.[0];
        text += pick(choice) ?? '';
        finish = choice?.finish_reason ?? finish;
    }

    // reached only when the SDK's async iterator completed, i.e. it saw
    // the end of the SSE stream ("data: [DONE]" or the end of the body)

    return { text, chunks, stream_done: true, finish_reason: finish };
}

const prompt = 'Say hello';
const messages = [{ role: 'user', content: 'Say hello' }];

// a non-streaming completion, through the client c

async function completion(name, c) {
    const { data, response, request_id } = await c.completions
        .create({ model: opts.model, prompt, max_tokens: 16 })
        .withResponse();

    return raw(name, response, {
        request_id,
        stream: false,
        object: data.object,
        text: data.choices[0].text,
        chunks: 0,
        finish_reason: data.choices[0].finish_reason,
    });
}

await run('completion', () => completion('completion', client));

await run('completion_stream', async () => {
    const { data: stream, response, request_id } = await client.completions
        .create({ model: opts.model, prompt, max_tokens: 16, stream: true })
        .withResponse();

    return raw('completion_stream', response, {
        request_id,
        stream: true,
        ...(await drain(stream, (c) => c?.text)),
    });
});

await run('chat', async () => {
    const { data, response, request_id } = await client.chat.completions
        .create({ model: opts.model, messages, max_tokens: 16 })
        .withResponse();

    return raw('chat', response, {
        request_id,
        stream: false,
        object: data.object,
        text: data.choices[0].message.content,
        role: data.choices[0].message.role,
        chunks: 0,
        finish_reason: data.choices[0].finish_reason,
    });
});

await run('chat_stream', async () => {
    const { data: stream, response, request_id } = await client.chat
        .completions.create({ model: opts.model, messages, max_tokens: 16,
            stream: true })
        .withResponse();

    return raw('chat_stream', response, {
        request_id,
        stream: true,
        ...(await drain(stream, (c) => c?.delta?.content)),
    });
});

// .asResponse(): the raw fetch Response, body left to the caller

await run('chat_raw', async () => {
    const response = await client.chat.completions
        .create({ model: opts.model, messages, max_tokens: 16 })
        .asResponse();
    const data = await response.json();

    return raw('chat_raw', response, {
        stream: false,
        object: data.object,
        text: data.choices[0].message.content,
        chunks: 0,
        finish_reason: data.choices[0].finish_reason,
    });
});

// the client's own attempt id, through defaultHeaders

await run('client_id', () => completion('client_id', namedClient));

// the same id again, through per-request headers, on a streaming call:
// the gateway refuses it with 409 before anything is forwarded

await run('duplicate', async () => {
    const { data: stream, response, request_id } = await client.chat
        .completions.create({ model: opts.model, messages, max_tokens: 16,
            stream: true },
        { headers: { 'X-Dynamo-Attempt-Id': opts.attemptId } })
        .withResponse();

    return raw('duplicate', response, {
        request_id,
        stream: true,
        ...(await drain(stream, (c) => c?.delta?.content)),
    });
});

// the same id once more from a client with the SDK's default retries
// (maxRetries 2), which retries a 409 unless the answer says otherwise:
// the gateway's X-Should-Retry: false makes it one request; "fetches"
// counts what the SDK sent

let fetches = 0;

const retrying = new OpenAI({
    ...common,
    maxRetries: 2,
    fetch: (url, init) => {
        fetches++;
        return keepErrorBody(url, init);
    },
});

await run('duplicate_retries', async () => {
    const { response, request_id } = await retrying.completions
        .create({ model: opts.model, prompt, max_tokens: 16 },
        { headers: { 'X-Dynamo-Attempt-Id': opts.attemptId } })
        .withResponse();

    return raw('duplicate_retries', response, { request_id });
});

print({ call: 'duplicate_retries_fetches', ok: true, fetches });
