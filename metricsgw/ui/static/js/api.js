// The gateway's JSON API, as the pages read it: one call, its data and warnings, or an ApiError in the API's words.

export class ApiError extends Error {
  constructor(message, status, type) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

function url(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    for (const one of Array.isArray(v) ? v : [v]) {
      if (one !== undefined && one !== null && one !== "") q.append(k, one);
    }
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

// GET (or POST, form-encoded) ``path``; resolves to the whole body ({status, data, warnings, infos...}).
export async function call(path, params, method = "GET") {
  let resp;
  try {
    resp = method === "GET"
      ? await fetch(url(path, params), { headers: { Accept: "application/json" } })
      : await fetch(path, { method, body: new URLSearchParams(params || {}),
                             headers: { Accept: "application/json" } });
  } catch (err) {
    throw new ApiError(`the gateway did not answer (${err.message})`, 0, "unavailable");
  }
  const text = await resp.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ApiError(text.trim() || `${resp.status} ${resp.statusText}`, resp.status, "http");
  }
  if (!resp.ok || (body.status && body.status !== "success")) {
    throw new ApiError(body.error || `${resp.status} ${resp.statusText}`, resp.status, body.errorType || "http");
  }
  return body;
}

export async function data(path, params) {
  return (await call(path, params)).data;
}

// The settings an error names, as flags: "--query.max-samples" (every limit's message names the one to raise).
export function flagsIn(text) {
  return [...new Set(String(text).match(/--[a-z][a-z0-9_.-]*[a-z0-9]/g) || [])];
}
