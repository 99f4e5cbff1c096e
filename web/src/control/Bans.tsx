// The control room's Bans view (docs/security.md, "Bans and the abuse registry"): the active bans with their
// reason, source and time left (counted down on the server's clock), a form to ban an
// address or range for a time or permanently, a confirmed Unban per ban, and the ban log.
// Both lists are paged with the API's `next_cursor` ("Older" / "Newer").
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, fieldMessage, parseDuration, type Api, type Ban, type BanField, type BanLogEntry } from './api';
import { actionLabel, banDeadline, banKey, describeLength, formatTimeLeft, parseTime, sourceLabel } from './bans';
import { formatWhen, plural } from './format';

/** How often the active bans are re-read. */
const BANS_POLL_MS = 2000;
/** How often the ban log's page is re-read (expiries and automatic bans appear there). */
const LOG_POLL_MS = 5000;
/** Bans per page of the active list. */
const BANS_PAGE = 50;
/** Entries per page of the ban log. */
const LOG_PAGE = 20;
/** The duration the form starts with. */
const DEFAULT_DURATION = '1h';

interface Notice {
  kind: 'ok' | 'error';
  text: string;
}

function auditNote(audit: { written: boolean; error?: string } | undefined): string {
  return audit && !audit.written ? ` Not recorded in the audit log: ${audit.error ?? 'write failed'}.` : '';
}

function asApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
}

interface Page<T> {
  items: T[];
  next: number | null;
  /** The cursor this page was read with (null: the newest). */
  cursor: number | null;
  /** When the answer arrived (local ms). */
  receivedAt: number;
}

/** One paged list, re-read every `pollMs`: the current page, and "Older" / "Newer" through
 * a stack of the cursors walked so far. */
function usePaged<T>(
  fetchPage: (cursor: number | null, signal: AbortSignal) => Promise<{ items: T[]; next: number | null }>,
  pollMs: number,
  onUnauthorized: (e: ApiError) => void,
) {
  const [cursors, setCursors] = useState<(number | null)[]>([null]);
  const cursor = cursors[cursors.length - 1];
  const [page, setPage] = useState<Page<T> | null>(null);
  const [error, setError] = useState<string | null>(null);
  const reloadRef = useRef<() => void>(() => {});

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let controller: AbortController | undefined;
    const load = async () => {
      clearTimeout(timer);
      controller?.abort();
      const mine = new AbortController();
      controller = mine;
      try {
        const result = await fetchPage(cursor, mine.signal);
        if (stopped || mine.signal.aborted) return;
        setPage({ items: result.items, next: result.next, cursor, receivedAt: Date.now() });
        setError(null);
      } catch (err) {
        if (stopped || mine.signal.aborted) return;
        const e = asApiError(err);
        if (e.unauthorized) {
          stopped = true;
          onUnauthorized(e);
          return;
        }
        setError(e.message);
      }
      if (!stopped) timer = setTimeout(load, pollMs);
    };
    reloadRef.current = () => void load();
    void load();
    return () => {
      stopped = true;
      clearTimeout(timer);
      controller?.abort();
    };
  }, [cursor, fetchPage, pollMs, onUnauthorized]);

  const current = page && page.cursor === cursor ? page : null;
  return {
    page: current,
    error,
    pageNumber: cursors.length,
    canOlder: current !== null && current.next !== null,
    older: () => {
      if (current && current.next !== null) {
        const next = current.next;
        setCursors((c) => [...c, next]);
      }
    },
    newer: () => setCursors((c) => (c.length > 1 ? c.slice(0, -1) : c)),
    reload: () => reloadRef.current(),
  };
}

export function BansView(props: { api: Api; onUnauthorized: (e: ApiError) => void }) {
  const { api, onUnauthorized } = props;
  const fetchBans = useCallback(
    async (cursor: number | null, signal: AbortSignal) => {
      const r = await api.bans({ limit: BANS_PAGE, cursor }, signal);
      return { items: r.bans, next: r.next_cursor };
    },
    [api],
  );
  const fetchLog = useCallback(
    async (cursor: number | null, signal: AbortSignal) => {
      const r = await api.banLog({ limit: LOG_PAGE, cursor }, signal);
      return { items: r.log, next: r.next_cursor };
    },
    [api],
  );
  const bans = usePaged<Ban>(fetchBans, BANS_POLL_MS, onUnauthorized);
  const log = usePaged<BanLogEntry>(fetchLog, LOG_POLL_MS, onUnauthorized);
  const changed = () => {
    bans.reload();
    log.reload();
  };

  return (
    <>
      <h2 class="cr-sr">Bans</h2>
      <div class="cr-bans">
        <BanForm api={api} onUnauthorized={onUnauthorized} onBanned={changed} />
        <ActiveBans list={bans} api={api} onUnauthorized={onUnauthorized} onUnbanned={changed} />
        <BanLog list={log} />
      </div>
    </>
  );
}

type Paged<T> = ReturnType<typeof usePaged<T>>;

function Pager(props: { label: string; list: Paged<unknown>; id: string }) {
  const { list } = props;
  if (list.pageNumber === 1 && !list.canOlder) return null;
  return (
    <nav class="cr-pager" aria-label={props.label}>
      <button type="button" class="cr-btn" disabled={list.pageNumber === 1} onClick={list.newer} data-page="newer">
        Newer
      </button>
      <span class="cr-muted" id={`${props.id}-page`}>
        page {list.pageNumber}
      </span>
      <button type="button" class="cr-btn" disabled={!list.canOlder} onClick={list.older} data-page="older">
        Older
      </button>
    </nav>
  );
}

const FIELD_IDS: Record<BanField, string> = {
  target: 'cr-ban-target',
  duration_secs: 'cr-ban-duration',
  reason: 'cr-ban-reason',
};

function BanForm(props: { api: Api; onUnauthorized: (e: ApiError) => void; onBanned: () => void }) {
  const [target, setTarget] = useState('');
  const [duration, setDuration] = useState(DEFAULT_DURATION);
  const [permanent, setPermanent] = useState(false);
  const [reason, setReason] = useState('');
  const [errors, setErrors] = useState<Partial<Record<BanField | 'form', string>>>({});
  const [result, setResult] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const clear = (field: BanField) => {
    setErrors((e) => ({ ...e, [field]: undefined, form: undefined }));
    setResult(null);
  };

  const focus = (field: BanField) => document.getElementById(FIELD_IDS[field])?.focus();

  const submit = async (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setResult(null);
    const typedTarget = target.trim();
    if (!typedTarget) {
      setErrors({ target: 'Enter an address (203.0.113.7) or a range (203.0.113.0/24).' });
      focus('target');
      return;
    }
    let secs: number | null = null;
    if (!permanent) {
      secs = parseDuration(duration);
      if (secs === null) {
        setErrors({ duration_secs: 'Write a duration such as 90s, 30m, 1h or 7d, or tick Permanent.' });
        focus('duration_secs');
        return;
      }
    }
    setBusy(true);
    setErrors({});
    try {
      const res = await props.api.ban({ target: typedTarget, duration_secs: secs, reason: reason.trim() });
      setResult(`Banned ${res.ban.target} ${describeLength(secs)}.${auditNote(res.audit)}`);
      setTarget('');
      setReason('');
      props.onBanned();
    } catch (err) {
      const e = asApiError(err);
      if (e.unauthorized) {
        props.onUnauthorized(e);
      } else if (e.field === 'target' || e.field === 'duration_secs' || e.field === 'reason') {
        setErrors({ [e.field]: fieldMessage(e) });
        focus(e.field);
      } else {
        setErrors({ form: `Not banned: ${e.message}` });
      }
    } finally {
      setBusy(false);
    }
  };

  const describedBy = (field: BanField, hint?: string) =>
    [hint, errors[field] ? `${FIELD_IDS[field]}-error` : undefined].filter(Boolean).join(' ') || undefined;

  const fieldError = (field: BanField) =>
    errors[field] ? (
      <p class="cr-field-error" id={`${FIELD_IDS[field]}-error`} data-field-error={field}>
        {errors[field]}
      </p>
    ) : null;

  const fieldNames: Record<BanField, string> = { target: 'address or range', duration_secs: 'duration', reason: 'reason' };
  const firstError = (['target', 'duration_secs', 'reason'] as const).find((f) => errors[f]);

  return (
    <section class="cr-tile" aria-labelledby="cr-ban-title">
      <header class="cr-tile-head">
        <h3 id="cr-ban-title">Ban an address or range</h3>
      </header>
      <form class="cr-ban-form" onSubmit={submit} noValidate aria-labelledby="cr-ban-title">
        <div class={`cr-field cr-ban-target${errors.target ? ' cr-field-invalid' : ''}`}>
          <label for={FIELD_IDS.target}>Address or range</label>
          <input
            id={FIELD_IDS.target}
            name="target"
            type="text"
            autocomplete="off"
            spellcheck={false}
            value={target}
            aria-invalid={errors.target ? 'true' : undefined}
            aria-describedby={describedBy('target', 'cr-ban-target-hint')}
            onInput={(ev) => {
              setTarget((ev.currentTarget as HTMLInputElement).value);
              clear('target');
            }}
          />
          <p class="cr-hint" id="cr-ban-target-hint">
            IPv4 or IPv6, or a CIDR range no broader than /8 (IPv4) or /16 (IPv6): 203.0.113.0/24
          </p>
          {fieldError('target')}
        </div>
        <div class={`cr-field${errors.duration_secs ? ' cr-field-invalid' : ''}`}>
          <label for={FIELD_IDS.duration_secs}>Duration</label>
          <input
            id={FIELD_IDS.duration_secs}
            name="duration"
            type="text"
            autocomplete="off"
            spellcheck={false}
            value={duration}
            disabled={permanent}
            aria-invalid={errors.duration_secs ? 'true' : undefined}
            aria-describedby={describedBy('duration_secs', 'cr-ban-duration-hint')}
            onInput={(ev) => {
              setDuration((ev.currentTarget as HTMLInputElement).value);
              clear('duration_secs');
            }}
          />
          <p class="cr-hint" id="cr-ban-duration-hint">
            90s, 30m, 1h, 7d
          </p>
          {fieldError('duration_secs')}
        </div>
        <div class="cr-field cr-check">
          <input
            id="cr-ban-permanent"
            name="permanent"
            type="checkbox"
            checked={permanent}
            onChange={(ev) => {
              setPermanent((ev.currentTarget as HTMLInputElement).checked);
              clear('duration_secs');
            }}
          />
          <label for="cr-ban-permanent">Permanent (until lifted)</label>
        </div>
        <div class={`cr-field cr-ban-reason${errors.reason ? ' cr-field-invalid' : ''}`}>
          <label for={FIELD_IDS.reason}>Reason</label>
          <input
            id={FIELD_IDS.reason}
            name="reason"
            type="text"
            autocomplete="off"
            value={reason}
            aria-invalid={errors.reason ? 'true' : undefined}
            aria-describedby={describedBy('reason', 'cr-ban-reason-hint')}
            onInput={(ev) => {
              setReason((ev.currentTarget as HTMLInputElement).value);
              clear('reason');
            }}
          />
          <p class="cr-hint" id="cr-ban-reason-hint">
            Shown in the list, the ban log and the audit log (at most 500 characters)
          </p>
          {fieldError('reason')}
        </div>
        <div class="cr-ban-buttons">
          <button type="submit" class="cr-btn cr-btn-danger" disabled={busy}>
            {busy ? 'Banning…' : permanent ? 'Ban permanently' : 'Ban'}
          </button>
        </div>
      </form>
      <div role="alert" class="cr-config-alert">
        {errors.form && <p class="cr-msg cr-msg-error">{errors.form}</p>}
        {firstError && (
          <p class="cr-sr">
            Not banned: {fieldNames[firstError]}: {errors[firstError]}
          </p>
        )}
      </div>
      <div role="status" aria-live="polite">
        {result && (
          <p class="cr-msg cr-msg-ok" data-testid="ban-result">
            {result}
          </p>
        )}
      </div>
    </section>
  );
}

function ActiveBans(props: {
  list: Paged<Ban>;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  onUnbanned: () => void;
}) {
  const { list } = props;
  const { page } = list;
  // Re-rendered every second for the countdown; the time itself is read at render, so a
  // fresh reading is never counted from a tick older than it.
  const [, setTick] = useState(0);
  const now = Date.now();
  const [confirming, setConfirming] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [notice, setNotice] = useState<Notice | null>(null);
  const deadlines = useRef(new Map<string, number | null>());
  const confirmButton = useRef<HTMLButtonElement>(null);
  const heading = useRef<HTMLHeadingElement>(null);

  useEffect(() => {
    const t = setInterval(() => setTick((n) => n + 1), 1000);
    return () => clearInterval(t);
  }, []);

  // Each reading refines when each ban ends (see banDeadline); bans no longer listed are
  // forgotten.
  const ends = useMemo(() => {
    const out = new Map<string, number | null>();
    if (!page) return out;
    for (const b of page.items) {
      const key = banKey(b);
      out.set(key, banDeadline(b, page.receivedAt, deadlines.current.get(key)));
    }
    deadlines.current = out;
    return out;
  }, [page]);

  useEffect(() => {
    if (confirming) confirmButton.current?.focus();
  }, [confirming]);

  const cancel = (target: string) => {
    setConfirming(null);
    requestAnimationFrame(() =>
      document.querySelector<HTMLButtonElement>(`tr[data-target="${CSS.escape(target)}"] [data-action="unban"]`)?.focus(),
    );
  };

  const unban = async (target: string) => {
    setBusy(true);
    setNotice(null);
    try {
      const res = await props.api.unban(target);
      setNotice({ kind: 'ok', text: `Lifted the ban on ${res.unbanned.target}.${auditNote(res.audit)}` });
      setConfirming(null);
      heading.current?.focus();
      props.onUnbanned();
    } catch (err) {
      const e = asApiError(err);
      setConfirming(null);
      if (e.unauthorized) props.onUnauthorized(e);
      else if (e.status === 404) {
        setNotice({ kind: 'error', text: `${target} is no longer banned (it expired or was lifted elsewhere).` });
        props.onUnbanned();
      } else setNotice({ kind: 'error', text: `Unban failed: ${e.message}` });
    } finally {
      setBusy(false);
    }
  };

  const count = page ? page.items.length : null;
  return (
    <section class="cr-tile" aria-labelledby="cr-bans-title" data-testid="active-bans">
      <header class="cr-tile-head">
        <h3 id="cr-bans-title" ref={heading} tabIndex={-1}>
          Active bans
        </h3>
        <span class="cr-muted">
          {count === null || (count === 0 && list.pageNumber === 1) ? '' : list.pageNumber === 1 && !list.canOlder ? plural(count, 'ban', 'bans') : `${plural(count, 'ban', 'bans')} on this page`}
        </span>
      </header>
      {list.error && <p class="cr-msg cr-msg-error">Cannot read the bans: {list.error}</p>}
      {page === null ? (
        <p class="cr-muted">Loading the bans…</p>
      ) : page.items.length === 0 ? (
        <p class="cr-muted" data-testid="no-bans">
          {list.pageNumber === 1 ? 'Nobody is banned.' : 'No older bans.'}
        </p>
      ) : (
        <div class="cr-table-wrap">
          <table class="cr-table">
            <caption class="cr-sr">Active bans, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Target</th>
                <th scope="col">Reason</th>
                <th scope="col">Source</th>
                <th scope="col">Since</th>
                <th scope="col">Time left</th>
                <th scope="col">
                  <span class="cr-sr">Action</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {page.items.map((b) => {
                const since = parseTime(b.since);
                return (
                  <tr key={banKey(b)} data-target={b.target}>
                    <td>
                      <code>{b.target}</code>
                    </td>
                    <td data-col="reason">{b.reason || <span class="cr-muted">–</span>}</td>
                    <td data-col="source">{sourceLabel(b.source)}</td>
                    <td>
                      <time dateTime={b.since}>{formatWhen(since, now)}</time>
                    </td>
                    <td data-col="left">
                      {b.until ? (
                        <time dateTime={b.until} title={`until ${formatWhen(parseTime(b.until), now)}`}>
                          {formatTimeLeft(ends.get(banKey(b)) ?? null, now)}
                        </time>
                      ) : (
                        'permanent'
                      )}
                    </td>
                    <td>
                      <div class="cr-row-actions">
                        {confirming === b.target ? (
                          <>
                            <span>Lift the ban on {b.target}?</span>
                            <button
                              type="button"
                              ref={confirmButton}
                              class="cr-btn cr-btn-primary"
                              disabled={busy}
                              onClick={() => void unban(b.target)}
                            >
                              Confirm unban
                            </button>
                            <button type="button" class="cr-btn" disabled={busy} onClick={() => cancel(b.target)}>
                              Cancel
                            </button>
                          </>
                        ) : (
                          <button
                            type="button"
                            class="cr-btn"
                            data-action="unban"
                            disabled={busy}
                            onClick={() => {
                              setNotice(null);
                              setConfirming(b.target);
                            }}
                          >
                            Unban<span class="cr-sr"> {b.target}</span>
                          </button>
                        )}
                      </div>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      <Pager label="Active bans pages" list={list as Paged<unknown>} id="cr-bans" />
      <div class="cr-notice" role="status" aria-live="polite">
        {notice && <p class={notice.kind === 'ok' ? 'cr-msg cr-msg-ok' : 'cr-msg cr-msg-error'}>{notice.text}</p>}
      </div>
    </section>
  );
}

function BanLog(props: { list: Paged<BanLogEntry> }) {
  const { list } = props;
  const { page } = list;
  const now = page?.receivedAt ?? Date.now();
  return (
    <section class="cr-tile" aria-labelledby="cr-banlog-title" data-testid="ban-log">
      <header class="cr-tile-head">
        <h3 id="cr-banlog-title">Ban log</h3>
        <span class="cr-muted">every ban, unban and expiry, newest first</span>
      </header>
      {list.error && <p class="cr-msg cr-msg-error">Cannot read the ban log: {list.error}</p>}
      {page === null ? (
        <p class="cr-muted">Loading the ban log…</p>
      ) : page.items.length === 0 ? (
        <p class="cr-muted">{list.pageNumber === 1 ? 'Nothing has been banned yet.' : 'No older entries.'}</p>
      ) : (
        <div class="cr-table-wrap">
          <table class="cr-table">
            <caption class="cr-sr">The ban log, newest first, page {list.pageNumber}</caption>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Action</th>
                <th scope="col">Target</th>
                <th scope="col">Source</th>
                <th scope="col">Reason</th>
                <th scope="col">Until</th>
              </tr>
            </thead>
            <tbody>
              {page.items.map((e) => (
                <tr key={e.cursor} data-action={e.action} data-target={e.target}>
                  <td>
                    <time dateTime={e.at}>{formatWhen(parseTime(e.at), now)}</time>
                  </td>
                  <td data-col="action">
                    <span class={`cr-log-${e.action}`}>{actionLabel(e.action)}</span>
                  </td>
                  <td>
                    <code>{e.target}</code>
                  </td>
                  <td>{sourceLabel(e.source)}</td>
                  <td>{e.reason || <span class="cr-muted">–</span>}</td>
                  <td>
                    {e.until ? (
                      <time dateTime={e.until}>{formatWhen(parseTime(e.until), now)}</time>
                    ) : e.action === 'banned' ? (
                      'permanent'
                    ) : (
                      <span class="cr-muted">–</span>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <Pager label="Ban log pages" list={list as Paged<unknown>} id="cr-banlog" />
    </section>
  );
}
