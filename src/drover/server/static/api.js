// The HTTP API as the page uses it: JSON requests with the bearer token when the server asks
// for one, and the events URL for the browser's EventSource (which cannot send headers, so the
// token rides as ?token=). The token is asked for once and kept in sessionStorage. Every
// request with a body says Content-Type: application/json (the server refuses any other).

const TOKEN_KEY = "drover-token";

export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

export class Api {
  /** `askToken(retry)` shows the token prompt and resolves with the token typed. */
  constructor(askToken) {
    this.askToken = askToken;
    this.asking = null;
  }

  get token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  async request(method, path, body) {
    for (let attempt = 0; ; attempt += 1) {
      const headers = { Accept: "application/json" };
      if (body !== undefined) headers["Content-Type"] = "application/json";
      const token = this.token;
      if (token) headers.Authorization = `Bearer ${token}`;
      const response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      if (response.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        await this.promptForToken(attempt > 0);
        continue;
      }
      const data = await response.json().catch(() => ({}));
      if (!response.ok) {
        const error = data.error || {};
        throw new ApiError(response.status, error.code, error.message || response.statusText, data);
      }
      return data;
    }
  }

  promptForToken(wasWrong) {
    if (!this.asking) {
      this.asking = this.askToken(wasWrong).then((token) => {
        sessionStorage.setItem(TOKEN_KEY, token);
        this.asking = null;
      });
    }
    return this.asking;
  }

  sessions() {
    return this.request("GET", "v1/sessions");
  }

  createSession() {
    return this.request("POST", "v1/sessions", {});
  }

  rename(id, title) {
    return this.request("PATCH", `v1/sessions/${encodeURIComponent(id)}`, { title });
  }

  deleteSession(id) {
    return this.request("DELETE", `v1/sessions/${encodeURIComponent(id)}`);
  }

  snapshot(id) {
    return this.request("GET", `v1/sessions/${encodeURIComponent(id)}`);
  }

  /** Send a message; while a turn runs it is queued (`{"queued": true, "message_id"}`). */
  send(id, content) {
    const path = `v1/sessions/${encodeURIComponent(id)}/messages`;
    return this.request("POST", path, { content, if_busy: "enqueue" });
  }

  cancelQueued(id, messageId) {
    const path = `v1/sessions/${encodeURIComponent(id)}/queue/${encodeURIComponent(messageId)}`;
    return this.request("DELETE", path);
  }

  interrupt(id) {
    return this.request("POST", `v1/sessions/${encodeURIComponent(id)}/interrupt`, {});
  }

  decide(id, requestId, decision) {
    const path = `v1/sessions/${encodeURIComponent(id)}/permissions/${encodeURIComponent(requestId)}`;
    return this.request("POST", path, { decision });
  }

  eventsUrl(id, after) {
    const params = new URLSearchParams({ after: String(after) });
    const token = this.token;
    if (token) params.set("token", token);
    return `v1/sessions/${encodeURIComponent(id)}/events?${params}`;
  }
}
