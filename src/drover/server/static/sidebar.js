// The sidebar: the session list — searched as you type, each session renamed in place or
// deleted after a confirmation — and, on a narrow screen, the drawer the header's button opens.
//
// The list is drawn from the last `GET /v1/sessions` and the open session's own state: its
// stream knows best whether its turn runs, so that session's marker follows the page's model
// once its snapshot is loaded (before that, the list's `running_turn_id`).

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export class Sidebar {
  /**
   * `app` gives: `api`, `sessionId` (the open one), `runningHere()` (true/false once the open
   * session's snapshot is loaded, else null), `flash(text)`, `sessionsChanged()` (the list or
   * a title changed) and `deleted(id)` (after a session is deleted).
   */
  constructor(app) {
    this.app = app;
    this.sessions = [];
    this.renaming = null; // the id being renamed in place
  }

  start() {
    $("session-search").addEventListener("input", () => this.render());
    $("sidebar-toggle").addEventListener("click", () => this.setOpen(!this.isOpen()));
    $("scrim").addEventListener("click", () => this.setOpen(false));
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.isOpen() && this.renaming === null) this.setOpen(false);
    });
    $("sessions").addEventListener("click", (e) => {
      if (e.target.closest("a")) this.setOpen(false); // picked: the drawer makes way
    });
  }

  // -- the drawer (narrow screens) -------------------------------------------------------------

  isOpen() {
    return $("layout").dataset.sidebar === "open";
  }

  setOpen(open) {
    $("layout").dataset.sidebar = open ? "open" : "closed";
    $("sidebar-toggle").setAttribute("aria-expanded", String(open));
    $("scrim").hidden = !open;
  }

  // -- the list --------------------------------------------------------------------------------

  summary(id) {
    return this.sessions.find((s) => s.id === id) || null;
  }

  async refresh() {
    let data;
    try {
      data = await this.app.api.sessions();
    } catch (err) {
      this.app.flash(`could not list sessions: ${err.message}`);
      return;
    }
    this.sessions = data.sessions;
    this.render();
    this.app.sessionsChanged();
  }

  running(s) {
    const here = s.id === this.app.sessionId ? this.app.runningHere() : null;
    return here === null ? Boolean(s.running_turn_id) : here;
  }

  render() {
    const query = $("session-search").value.trim().toLowerCase();
    const shown = this.sessions.filter(
      (s) => !query || (s.title || "").toLowerCase().includes(query) || s.id.toLowerCase().includes(query),
    );
    $("sessions").replaceChildren(...shown.map((s) => this.item(s)));
    $("sessions-empty").hidden = shown.length > 0 || this.sessions.length === 0;
  }

  /** Bring the open session's running marker up to date (no refetch). */
  markRunning() {
    const item = [...$("sessions").children].find((li) => li.dataset.sessionId === this.app.sessionId);
    const s = this.summary(this.app.sessionId);
    if (!item || !s) return;
    const running = this.running(s);
    item.classList.toggle("running", running);
    item.querySelector(".session-meta").textContent = this.meta(s, running);
  }

  meta(s, running) {
    return `${running ? "running · " : ""}${new Date(s.updated_at * 1000).toLocaleString()}`;
  }

  item(s) {
    const item = el("li");
    const running = this.running(s);
    item.dataset.sessionId = s.id;
    item.classList.toggle("current", s.id === this.app.sessionId);
    item.classList.toggle("running", running);
    const row = el("div", "session-row");
    if (this.renaming === s.id) {
      row.append(this.renameForm(s));
    } else {
      const link = el("a", "session-link", s.title || "(untitled session)");
      link.href = `#/sessions/${encodeURIComponent(s.id)}`;
      link.title = s.title || s.id;
      const rename = el("button", "session-rename", "✎");
      rename.type = "button";
      rename.title = "Rename";
      rename.setAttribute("aria-label", `Rename ${s.title || "session"}`);
      rename.addEventListener("click", () => this.startRename(s.id));
      const remove = el("button", "session-delete", "✕");
      remove.type = "button";
      remove.title = "Delete";
      remove.setAttribute("aria-label", `Delete ${s.title || "session"}`);
      remove.addEventListener("click", () => this.remove(s));
      const actions = el("span", "session-actions");
      actions.append(rename, remove);
      row.append(link, actions);
    }
    item.append(row, el("span", "session-meta", this.meta(s, running)));
    return item;
  }

  // -- rename in place -------------------------------------------------------------------------

  startRename(id) {
    this.renaming = id;
    this.render();
    const input = document.querySelector("#sessions .rename-input");
    input.focus();
    input.select();
  }

  renameForm(s) {
    const form = el("form", "rename-form");
    const input = el("input", "rename-input");
    input.value = s.title || "";
    input.maxLength = 200;
    input.setAttribute("aria-label", "New title");
    const cancel = () => {
      if (this.renaming !== s.id) return;
      this.renaming = null;
      this.render();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Escape") {
        e.preventDefault();
        cancel();
      }
    });
    input.addEventListener("blur", cancel);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.rename(s, input.value);
    });
    form.append(input);
    return form;
  }

  async rename(s, text) {
    const title = text.trim();
    this.renaming = null;
    if (!title || title === s.title) {
      this.render();
      return;
    }
    try {
      const renamed = await this.app.api.rename(s.id, title);
      Object.assign(s, renamed);
      this.app.flash("");
    } catch (err) {
      this.app.flash(`could not rename: ${err.message}`);
    }
    this.render();
    this.app.sessionsChanged();
  }

  // -- delete ----------------------------------------------------------------------------------

  async remove(s) {
    const name = s.title ? `“${s.title}”` : "this untitled session";
    if (!window.confirm(`Delete ${name}? Its whole transcript is deleted for good.`)) return;
    try {
      await this.app.api.deleteSession(s.id);
    } catch (err) {
      if (err.status !== 404) {
        // 404: it was gone already (another tab, another client).
        this.app.flash(
          err.code === "session_busy"
            ? "a turn is running on that session: interrupt it first, then delete it"
            : `could not delete: ${err.message}`,
        );
        return;
      }
    }
    this.app.deleted(s.id);
    await this.refresh();
  }
}
