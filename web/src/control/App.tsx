// The control room: sign in with the admin token, then a tile per room, polled every
// second, with the controls an incident needs, and the Queue view (the head of each line,
// a search by reference, move to the front), and the Bans view (Bans.tsx). See
// docs/admin-api.md, and docs/security.md "Priority" and "Bans and the abuse registry".
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import {
  Api,
  ApiError,
  buildPatch,
  clearToken,
  fieldMessage,
  loadToken,
  normalizeRef,
  saveToken,
  type QueueEntry,
  type QueueResult,
  type RoomView,
  type Settings,
  type Status,
} from './api';
import { BansView } from './Bans';
import { ModeSwitch, PhaseBadge } from './Mode';
import {
  formatAdaptive,
  formatAge,
  formatBreaker,
  formatClock,
  formatCount,
  formatDuration,
  formatEta,
  formatInflight,
  formatRate,
  plural,
} from './format';
import { addSample, describeHistory, sparkline, WINDOW_MS, type Sample } from './sparkline';

/** How often the rooms and the status are read. */
export const POLL_MS = 1000;
/** A poll that has not answered in this long counts as failed. */
const POLL_TIMEOUT_MS = 5000;
/** Statistics older than this are marked stale on the tile. */
const STALE_SECS = 5;
/** How often the Queue view re-reads the head of each line. */
const QUEUE_POLL_MS = 2000;
/** How many of the head of the line the Queue view shows. */
const QUEUE_LIMIT = 50;

type Storage = Pick<globalThis.Storage, 'getItem' | 'setItem' | 'removeItem'>;

export interface AppProps {
  storage: Storage;
  version: string;
  makeApi?: (token: string) => Api;
}

export function App({ storage, version, makeApi = (t) => new Api(t) }: AppProps) {
  const [token, setToken] = useState<string | null>(() => loadToken(storage));
  const [notice, setNotice] = useState<string | null>(null);
  const api = useMemo(() => (token ? makeApi(token) : null), [token]);

  const signOut = useCallback(
    (message: string | null) => {
      clearToken(storage);
      setToken(null);
      setNotice(message);
    },
    [storage],
  );
  const onUnauthorized = useCallback(
    (e: ApiError) =>
      signOut(`Signed out: the server refused the admin token (${e.title}). It may have been changed; sign in again.`),
    [signOut],
  );

  if (!api) {
    return (
      <SignIn
        version={version}
        notice={notice}
        makeApi={makeApi}
        onSignedIn={(t) => {
          saveToken(storage, t);
          setNotice(null);
          setToken(t);
        }}
      />
    );
  }
  return (
    <Console api={api} version={version} onUnauthorized={onUnauthorized} onSignOut={() => signOut('Signed out.')} />
  );
}

function SignIn(props: {
  version: string;
  notice: string | null;
  makeApi: (token: string) => Api;
  onSignedIn: (token: string) => void;
}) {
  const [value, setValue] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => input.current?.focus(), []);

  const submit = async (e: Event) => {
    e.preventDefault();
    const token = value.trim();
    if (!token) {
      setError('Enter the admin token.');
      input.current?.focus();
      return;
    }
    setBusy(true);
    setError(null);
    try {
      await props.makeApi(token).status();
      props.onSignedIn(token);
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
      setError(
        e.unauthorized
          ? `That token was refused (${e.title}). Use the admin_token from anteroom's configuration (or ANTEROOM_ADMIN_TOKEN).`
          : `Could not check the token: ${e.message}`,
      );
      setBusy(false);
      input.current?.select();
    }
  };

  return (
    <div class="cr-signin-page">
      <main class="cr-signin">
        <h1>
          anteroom <span class="cr-muted">control room</span>
        </h1>
        {props.notice && (
          <p class="cr-msg cr-msg-warn" role="status">
            {props.notice}
          </p>
        )}
        <form onSubmit={submit} noValidate>
          <label for="cr-token">Admin token</label>
          <input
            id="cr-token"
            ref={input}
            type="password"
            autocomplete="off"
            spellcheck={false}
            value={value}
            aria-invalid={error ? 'true' : undefined}
            aria-describedby={error ? 'cr-token-error cr-token-hint' : 'cr-token-hint'}
            onInput={(e) => setValue((e.currentTarget as HTMLInputElement).value)}
          />
          <p id="cr-token-hint" class="cr-hint">
            Kept in this tab only (session storage): closing the tab signs you out.
          </p>
          {error && (
            <p id="cr-token-error" class="cr-msg cr-msg-error" role="alert">
              {error}
            </p>
          )}
          <button type="submit" class="cr-btn cr-btn-primary" disabled={busy}>
            {busy ? 'Checking…' : 'Sign in'}
          </button>
        </form>
        <p class="cr-hint">
          anteroom {props.version} · API: <a href="/__anteroom/admin/api/openapi.json">openapi.json</a>
        </p>
      </main>
    </div>
  );
}

interface Snapshot {
  rooms: RoomView[] | null;
  status: Status | null;
  /** When the last poll succeeded (browser clock, ms). */
  lastOk: number | null;
  /** Why the last poll failed, if it did. */
  error: ApiError | null;
  /** Since when polls have been failing. */
  failingSince: number | null;
  history: Record<string, Sample[]>;
}

function Console(props: { api: Api; version: string; onUnauthorized: (e: ApiError) => void; onSignOut: () => void }) {
  const { api, onUnauthorized } = props;
  const [snap, setSnap] = useState<Snapshot>({
    rooms: null,
    status: null,
    lastOk: null,
    error: null,
    failingSince: null,
    history: {},
  });
  const [now, setNow] = useState(() => Date.now());
  const refreshRef = useRef<() => void>(() => {});

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let inFlight = false;
    let again = false;
    let controller: AbortController | undefined;

    const tick = async () => {
      if (inFlight) {
        again = true;
        return;
      }
      inFlight = true;
      clearTimeout(timer);
      const started = Date.now();
      controller = new AbortController();
      const timeout = setTimeout(() => controller?.abort(), POLL_TIMEOUT_MS);
      try {
        const [rooms, status] = await Promise.all([api.rooms(controller.signal), api.status(controller.signal)]);
        if (stopped) return;
        const t = Date.now();
        setSnap((prev) => {
          const history: Record<string, Sample[]> = {};
          for (const r of rooms) {
            const past = prev.history[r.room] ?? [];
            history[r.room] =
              r.stats_available && typeof r.waiting === 'number' ? addSample(past, { t, v: r.waiting }) : past;
          }
          return { rooms, status, lastOk: t, error: null, failingSince: null, history };
        });
        setNow(t);
      } catch (err) {
        if (stopped) return;
        const e =
          err instanceof ApiError
            ? err
            : new ApiError(0, 'Cannot reach anteroom', `no answer within ${POLL_TIMEOUT_MS / 1000} s`);
        if (e.unauthorized) {
          stopped = true;
          onUnauthorized(e);
          return;
        }
        const t = Date.now();
        setSnap((prev) => ({ ...prev, error: e, failingSince: prev.failingSince ?? t }));
        setNow(t);
      } finally {
        clearTimeout(timeout);
        inFlight = false;
      }
      if (stopped) return;
      if (again) {
        again = false;
        void tick();
      } else {
        timer = setTimeout(tick, Math.max(200, POLL_MS - (Date.now() - started)));
      }
    };
    refreshRef.current = () => void tick();
    void tick();
    return () => {
      stopped = true;
      clearTimeout(timer);
      controller?.abort();
    };
  }, [api, onUnauthorized]);

  const refresh = useCallback(() => refreshRef.current(), []);
  const { rooms, status } = snap;
  const [view, setView] = useState<'rooms' | 'queue' | 'bans'>('rooms');

  return (
    <div class="cr-shell">
      <header class="cr-top">
        <h1>
          anteroom <span class="cr-muted">control room</span>
        </h1>
        <StoreIndicator status={status} />
        <p class="cr-updated" aria-live="off">
          {snap.lastOk === null
            ? snap.error
              ? 'No readings'
              : 'Loading…'
            : `Updated ${formatClock(snap.lastOk)} (${formatAge((now - snap.lastOk) / 1000)} ago)`}
        </p>
        <button type="button" class="cr-btn" onClick={props.onSignOut}>
          Sign out
        </button>
      </header>
      <div class="cr-banners">
        <Banners snap={snap} now={now} />
      </div>
      <nav class="cr-views" aria-label="Views">
        <button
          type="button"
          class="cr-btn cr-view"
          aria-current={view === 'rooms' ? 'page' : undefined}
          onClick={() => setView('rooms')}
        >
          Rooms
        </button>
        <button
          type="button"
          class="cr-btn cr-view"
          aria-current={view === 'queue' ? 'page' : undefined}
          onClick={() => setView('queue')}
        >
          Queue
        </button>
        <button
          type="button"
          class="cr-btn cr-view"
          aria-current={view === 'bans' ? 'page' : undefined}
          onClick={() => setView('bans')}
        >
          Bans
        </button>
      </nav>
      <main class="cr-main">
        {view === 'bans' ? (
          <BansView api={api} onUnauthorized={onUnauthorized} />
        ) : view === 'queue' ? (
          <QueueView rooms={rooms} api={api} onUnauthorized={onUnauthorized} refresh={refresh} />
        ) : (
          <RoomsView snap={snap} now={now} api={api} onUnauthorized={onUnauthorized} refresh={refresh} />
        )}
      </main>
      <footer class="cr-foot cr-muted">
        anteroom {status?.version ?? props.version} · polling every {POLL_MS / 1000} s · changes apply on the next
        admission pass and are written to the audit log
        {status ? ` (${status.audit_log.path})` : ''}
      </footer>
    </div>
  );
}

function RoomsView(props: {
  snap: Snapshot;
  now: number;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { snap, now, api, onUnauthorized, refresh } = props;
  const { rooms } = snap;
  return (
    <>
        <h2 class="cr-sr">Rooms</h2>
        {rooms === null ? (
          <p class="cr-muted">{snap.error ? 'Waiting for the first reading…' : 'Loading rooms…'}</p>
        ) : rooms.length === 0 ? (
          <p class="cr-muted">This anteroom has no rooms.</p>
        ) : (
          <div class="cr-grid">
            {rooms.map((r, i) => (
              <RoomTile
                key={r.room}
                index={i}
                room={r}
                samples={snap.history[r.room] ?? []}
                now={now}
                api={api}
                stale={snap.error !== null}
                onUnauthorized={onUnauthorized}
                refresh={refresh}
              />
            ))}
          </div>
        )}
    </>
  );
}

/** The Queue view: for every room, the head of the line and a search by reference, with a
 * confirmed "move to front" per visitor (docs/security.md, "Priority"). */
function QueueView(props: {
  rooms: RoomView[] | null;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { rooms } = props;
  return (
    <>
      <h2 class="cr-sr">Queue</h2>
      {rooms === null ? (
        <p class="cr-muted">Loading rooms…</p>
      ) : rooms.length === 0 ? (
        <p class="cr-muted">This anteroom has no rooms.</p>
      ) : (
        <div class="cr-queues">
          {rooms.map((r, i) => (
            <QueuePanel
              key={r.room}
              id={`${slug(r.room, i)}-q`}
              room={r.room}
              api={props.api}
              onUnauthorized={props.onUnauthorized}
              refresh={props.refresh}
            />
          ))}
        </div>
      )}
    </>
  );
}

function when(ms: number | null, now: number): string {
  if (ms === null) return '–';
  return `${formatClock(ms)} (${formatAge(Math.max(0, (now - ms) / 1000))} ago)`;
}

function QueuePanel(props: {
  id: string;
  room: string;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { id, room, api, onUnauthorized } = props;
  const [head, setHead] = useState<QueueResult | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [typed, setTyped] = useState('');
  const [searchError, setSearchError] = useState<string | null>(null);
  /** The search's answer: the reference searched for and what was found. */
  const [found, setFound] = useState<{ ref: string; entries: QueueEntry[] } | null>(null);
  const [confirming, setConfirming] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [notice, setNotice] = useState<Notice | null>(null);
  const [now, setNow] = useState(() => Date.now());
  const reloadRef = useRef<() => void>(() => {});

  const asApiError = (err: unknown) => (err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err)));

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      clearTimeout(timer);
      try {
        const result = await api.queue(room, { limit: QUEUE_LIMIT });
        if (stopped) return;
        setHead(result);
        setLoadError(null);
      } catch (err) {
        if (stopped) return;
        const e = asApiError(err);
        if (e.unauthorized) {
          stopped = true;
          onUnauthorized(e);
          return;
        }
        setLoadError(e.message);
      }
      setNow(Date.now());
      if (!stopped) timer = setTimeout(load, QUEUE_POLL_MS);
    };
    reloadRef.current = () => void load();
    void load();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [api, room, onUnauthorized]);

  const search = async (e: Event) => {
    e.preventDefault();
    setNotice(null);
    const ref = normalizeRef(typed);
    if (ref === null) {
      setSearchError('A reference is 8 letters and digits, as the waiting page shows it.');
      return;
    }
    setSearchError(null);
    try {
      const result = await api.queue(room, { ref });
      setFound({ ref, entries: result.entries });
      setNow(Date.now());
    } catch (err) {
      const e = asApiError(err);
      if (e.unauthorized) onUnauthorized(e);
      else setSearchError(`The search failed: ${e.message}`);
    }
  };

  const move = async (ref: string) => {
    setBusy(true);
    setNotice(null);
    try {
      const res = await api.moveToFront(room, ref);
      setNotice({ kind: 'ok', text: `Moved ${ref} to position ${res.position ?? 1}.${auditNote(res.audit)}` });
      setConfirming(null);
      if (found) setFound({ ref: found.ref, entries: found.entries.map((x) => (x.ref === ref ? { ...x, position: res.position } : x)) });
      reloadRef.current();
      props.refresh();
    } catch (err) {
      const e = asApiError(err);
      setConfirming(null);
      if (e.unauthorized) onUnauthorized(e);
      else if (e.status === 404) setNotice({ kind: 'error', text: `${ref} is no longer waiting (admitted, gone or flushed).` });
      else setNotice({ kind: 'error', text: `Move to front failed: ${e.message}` });
    } finally {
      setBusy(false);
    }
  };

  const rows = found ? found.entries : (head?.entries ?? []);

  return (
    <section class="cr-tile cr-queue" aria-labelledby={`${id}-name`} data-queue={room}>
      <header class="cr-tile-head">
        <h3 id={`${id}-name`}>{room}</h3>
        <span class="cr-muted">
          {head?.waiting === null || head?.waiting === undefined ? '' : `${plural(head.waiting, 'visitor', 'visitors')} waiting`}
        </span>
      </header>
      <form class="cr-search" onSubmit={search} noValidate role="search" aria-label={`Find a visitor in ${room}`}>
        <label for={`${id}-ref`}>Find a visitor by ref</label>
        <input
          id={`${id}-ref`}
          type="text"
          autocomplete="off"
          spellcheck={false}
          value={typed}
          aria-invalid={searchError ? 'true' : undefined}
          aria-describedby={searchError ? `${id}-ref-error` : undefined}
          onInput={(e) => setTyped((e.currentTarget as HTMLInputElement).value)}
        />
        <button type="submit" class="cr-btn">
          Find
        </button>
        {found && (
          <button
            type="button"
            class="cr-btn"
            onClick={() => {
              setFound(null);
              setTyped('');
              setSearchError(null);
            }}
          >
            Show the head of the line
          </button>
        )}
        {searchError && (
          <p id={`${id}-ref-error`} class="cr-msg cr-msg-error" role="alert">
            {searchError}
          </p>
        )}
      </form>
      {loadError && <p class="cr-msg cr-msg-error">Cannot read the line: {loadError}</p>}
      {found && found.entries.length === 0 ? (
        <p class="cr-muted" data-testid="not-found">
          Nobody waiting in {room} has the reference {found.ref}.
        </p>
      ) : rows.length === 0 ? (
        <p class="cr-muted">{head === null ? 'Loading the line…' : 'Nobody is waiting.'}</p>
      ) : (
        <table class="cr-table">
          <caption class="cr-sr">
            {found ? `Visitor ${found.ref} in ${room}` : `The first ${rows.length} in line in ${room}`}
          </caption>
          <thead>
            <tr>
              <th scope="col">Position</th>
              <th scope="col">Ref</th>
              <th scope="col">Joined</th>
              <th scope="col">Last seen</th>
              <th scope="col">
                <span class="cr-sr">Action</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map((e) => (
              <tr key={e.ref} data-ref={e.ref}>
                <td data-col="position">{e.position ?? 'in the draw'}</td>
                <td>
                  <code>{e.ref}</code>
                </td>
                <td>{when(e.joined_at_ms, now)}</td>
                <td>{when(e.last_seen_ms, now)}</td>
                <td class="cr-row-actions">
                  {confirming === e.ref ? (
                    <>
                      <span>Move {e.ref} to position 1?</span>
                      <button type="button" class="cr-btn cr-btn-primary" disabled={busy} onClick={() => void move(e.ref)}>
                        Confirm move
                      </button>
                      <button type="button" class="cr-btn" disabled={busy} onClick={() => setConfirming(null)}>
                        Cancel
                      </button>
                    </>
                  ) : (
                    <button
                      type="button"
                      class="cr-btn"
                      disabled={busy}
                      onClick={() => {
                        setNotice(null);
                        setConfirming(e.ref);
                      }}
                    >
                      Move to front<span class="cr-sr"> {e.ref}</span>
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <div class="cr-notice" role="status" aria-live="polite">
        {notice && <p class={notice.kind === 'ok' ? 'cr-msg cr-msg-ok' : 'cr-msg cr-msg-error'}>{notice.text}</p>}
      </div>
    </section>
  );
}

function StoreIndicator({ status }: { status: Status | null }) {
  if (!status) return <p class="cr-store">Store: –</p>;
  const up = status.store.up;
  return (
    <p class={`cr-store ${up ? 'cr-store-up' : 'cr-store-down'}`}>
      <span class="cr-dot" aria-hidden="true" />
      Store ({status.store.kind}): <strong>{up ? 'up' : 'DOWN'}</strong>
    </p>
  );
}

function Banner(props: { kind: 'critical' | 'error' | 'warn'; title: string; children: ComponentChildren; id: string }) {
  return (
    <section class={`cr-banner cr-banner-${props.kind}`} role="alert" aria-labelledby={props.id} data-banner={props.id}>
      <h2 id={props.id}>{props.title}</h2>
      <p>{props.children}</p>
    </section>
  );
}

function Banners({ snap, now }: { snap: Snapshot; now: number }) {
  const { status, error } = snap;
  const out: ComponentChildren[] = [];
  if (error) {
    const since = snap.failingSince ?? now;
    out.push(
      <Banner kind="error" id="cr-banner-conn" key="conn" title={`Cannot read anteroom for ${formatDuration((now - since) / 1000)}`}>
        {error.message}.{' '}
        {snap.lastOk
          ? `Everything below is as of ${formatClock(snap.lastOk)} and may be out of date.`
          : 'Nothing has been read yet.'}{' '}
        Retrying every second.
      </Banner>,
    );
  }
  if (status?.fail_open.active) {
    out.push(
      <Banner kind="critical" id="cr-banner-failopen" key="failopen" title="FAIL-OPEN: everyone is let straight in">
        The queue store has been down longer than {formatDuration(status.fail_open.after_secs)}, so anteroom is proxying
        every visitor to the origin without a queue. The site has no protection until the store answers again.
      </Banner>,
    );
  }
  if (status && !status.store.up) {
    const failOpen = status.fail_open.enabled
      ? status.fail_open.active
        ? ''
        : ` Fail-open lets everyone in after ${formatDuration(status.fail_open.after_secs)} of outage.`
      : ' Fail-open is off: the line is held until the store answers.';
    out.push(
      <Banner
        kind="error"
        id="cr-banner-store"
        key="store"
        title={`Queue store (${status.store.kind}) down for ${formatDuration(status.store.down_for_secs)}`}
      >
        Counters show the last known values. Visitors keep their place but nobody is admitted, and changes are refused
        until it answers.{failOpen}
      </Banner>,
    );
  }
  if (status && !status.audit_log.ok) {
    out.push(
      <Banner kind="warn" id="cr-banner-audit" key="audit" title="The audit log cannot be written">
        {status.audit_log.last_error ?? 'Unknown error'} ({status.audit_log.path}). Changes still apply but are not
        recorded.
      </Banner>,
    );
  }
  return <>{out}</>;
}

interface Notice {
  kind: 'ok' | 'error';
  text: string;
}

function auditNote(audit: { written: boolean; error?: string } | undefined): string {
  return audit && !audit.written ? ` Not recorded in the audit log: ${audit.error ?? 'write failed'}.` : '';
}

function slug(room: string, index: number): string {
  return `cr-r${index}-${room.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

function RoomTile(props: {
  index: number;
  room: RoomView;
  samples: Sample[];
  now: number;
  api: Api;
  stale: boolean;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { room: r, api, onUnauthorized, refresh } = props;
  const id = slug(r.room, props.index);
  const [notice, setNotice] = useState<Notice | null>(null);
  const [busy, setBusy] = useState<string | null>(null);
  /** What a pause/resume just set, shown until the polled statistics agree (≤ 5 s). */
  const [expectPaused, setExpectPaused] = useState<{ value: boolean; until: number } | null>(null);
  const [flushOpen, setFlushOpen] = useState(false);

  const fail = (err: unknown, what: string) => {
    const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
    if (e.unauthorized) onUnauthorized(e);
    else setNotice({ kind: 'error', text: `${what} failed: ${e.message}` });
  };

  const paused =
    expectPaused && props.now < expectPaused.until && r.paused !== expectPaused.value ? expectPaused.value : r.paused;

  const togglePause = async () => {
    const pausing = !paused;
    setBusy('pause');
    setNotice(null);
    try {
      const res = pausing ? await api.pause(r.room) : await api.resume(r.room);
      setExpectPaused({ value: res.paused, until: Date.now() + 5000 });
      setNotice({
        kind: 'ok',
        text: (res.paused ? 'Paused: nobody is admitted until you resume.' : 'Resumed: admitting again.') + auditNote(res.audit),
      });
      refresh();
    } catch (err) {
      fail(err, pausing ? 'Pause' : 'Resume');
    } finally {
      setBusy(null);
    }
  };

  if (!r.stats_available) {
    return (
      <section class="cr-tile" aria-labelledby={`${id}-name`} data-room={r.room}>
        <header class="cr-tile-head">
          <h3 id={`${id}-name`}>{r.room}</h3>
        </header>
        <p class="cr-muted">No statistics yet: the queue store has not answered since this replica started.</p>
      </section>
    );
  }

  const ageSecs = r.stats_age_secs ?? 0;
  const staleStats = props.stale || ageSecs > STALE_SECS;
  const max = r.max_active ?? 0;
  const active = r.active ?? 0;
  const fill = max > 0 ? Math.min(1, active / max) : 0;
  const eta = formatEta(r.eta);
  const inflight = formatInflight(r.inflight);
  const breaker = formatBreaker(r.max_waiting, r.waiting);

  return (
    <section
      class={`cr-tile${paused ? ' cr-tile-paused' : ''}${staleStats ? ' cr-tile-stale' : ''}`}
      aria-labelledby={`${id}-name`}
      data-room={r.room}
    >
      <header class="cr-tile-head">
        <h3 id={`${id}-name`}>{r.room}</h3>
        <PhaseBadge phase={r.phase === 'paused' ? undefined : r.phase} />
        {paused && (
          <span class="cr-badge cr-badge-paused" data-testid="paused-badge">
            Paused
          </span>
        )}
        {staleStats && <span class="cr-badge cr-badge-stale">Stale</span>}
        <span class="cr-tile-age cr-muted">stats {formatAge(ageSecs)} old</span>
      </header>
      <dl class="cr-stats">
        <div class="cr-stat">
          <dt>Waiting</dt>
          <dd class="cr-big" data-stat="waiting">
            {formatCount(r.waiting)}
          </dd>
        </div>
        <div class="cr-stat">
          <dt>On the site</dt>
          <dd class="cr-big" data-stat="active">
            {formatCount(active)}
            <span class="cr-of"> / {formatCount(max)}</span>
          </dd>
          <div class={`cr-meter${fill >= 0.9 ? ' cr-meter-hot' : ''}`} aria-hidden="true">
            <div style={{ width: `${(fill * 100).toFixed(1)}%` }} />
          </div>
        </div>
        <div class="cr-stat">
          <dt>Admitted / s</dt>
          <dd class="cr-big" data-stat="observed_rate">
            {formatRate(r.observed_rate)}
          </dd>
          <dd class="cr-sub">limit {formatRate(r.rate)}/s</dd>
          {formatAdaptive(r) && (
            <dd class="cr-sub cr-adaptive" data-stat="effective_rate">
              ({formatAdaptive(r)})
            </dd>
          )}
        </div>
        <div class="cr-stat">
          <dt>Refused</dt>
          <dd class="cr-big" data-stat="refused">
            {formatCount(r.total_refused)}
          </dd>
        </div>
      </dl>
      <Sparkline id={id} samples={props.samples} now={props.now} />
      <p class="cr-totals cr-muted">
        joined {formatCount(r.total_joined)} · admitted {formatCount(r.total_admitted)} · expired{' '}
        {formatCount(r.total_expired)} · abandoned {formatCount(r.total_abandoned)} · session{' '}
        {formatDuration(r.session_ttl_secs)} · last pass{' '}
        {r.last_pass_ms === null || r.last_pass_ms === undefined ? '–' : `${r.last_pass_ms.toFixed(1)} ms`}
      </p>
      {eta && (
        <p class={`cr-eta${eta.belowAim ? ' cr-eta-low' : ''}`} data-stat="eta">
          {eta.text}
        </p>
      )}
      {(inflight || breaker) && (
        <ul class="cr-limits">
          {inflight && (
            <li class={inflight.near ? 'cr-limit-near' : undefined} data-stat="inflight">
              {inflight.text}
            </li>
          )}
          {breaker && (
            <li class={breaker.near ? 'cr-limit-near' : undefined} data-stat="breaker">
              {breaker.text}
              {breaker.fill && (
                <>
                  {' · '}
                  <strong data-stat="breaker-fill">{breaker.fill}</strong>
                </>
              )}
            </li>
          )}
        </ul>
      )}
      <ConfigForm id={id} room={r} api={api} onUnauthorized={onUnauthorized} refresh={refresh} />
      <ModeSwitch id={id} room={r} api={api} onUnauthorized={onUnauthorized} refresh={refresh} />
      <div class="cr-actions">
        <button
          type="button"
          class={`cr-btn ${paused ? 'cr-btn-primary' : 'cr-btn-warn'}`}
          disabled={busy !== null}
          onClick={togglePause}
          data-action={paused ? 'resume' : 'pause'}
        >
          {paused ? 'Resume admissions' : 'Pause admissions'}
        </button>
        <button
          type="button"
          class="cr-btn cr-btn-danger"
          disabled={busy !== null}
          onClick={() => {
            setNotice(null);
            setFlushOpen(true);
          }}
          data-action="flush"
        >
          Empty the queue…
        </button>
      </div>
      <div class="cr-notice" role="status" aria-live="polite">
        {notice && <p class={notice.kind === 'ok' ? 'cr-msg cr-msg-ok' : 'cr-msg cr-msg-error'}>{notice.text}</p>}
      </div>
      {flushOpen && (
        <FlushDialog
          id={id}
          room={r}
          api={api}
          onClose={(result) => {
            setFlushOpen(false);
            if (result) {
              setNotice({
                kind: 'ok',
                text: `Emptied the queue: removed ${plural(result.flushed, 'visitor', 'visitors')} from the line.${auditNote(result.audit)}`,
              });
              refresh();
            }
          }}
          onUnauthorized={onUnauthorized}
        />
      )}
    </section>
  );
}

const SPARK_W = 300;
const SPARK_H = 48;

function Sparkline({ id, samples, now }: { id: string; samples: Sample[]; now: number }) {
  const g = sparkline(samples, { width: SPARK_W, height: SPARK_H, now });
  return (
    <figure class="cr-spark">
      <figcaption class="cr-muted" id={`${id}-spark`}>
        <span>Queue depth, last {WINDOW_MS / 60_000} min</span>
        <span>
          peak {formatCount(g.peak)} · scale 0–{formatCount(g.top)}
        </span>
      </figcaption>
      <svg
        viewBox={`0 0 ${SPARK_W} ${SPARK_H}`}
        preserveAspectRatio="none"
        role="img"
        aria-labelledby={`${id}-spark`}
        aria-describedby={`${id}-spark-desc`}
        data-samples={samples.length}
      >
        <desc id={`${id}-spark-desc`}>{describeHistory(samples, now)}</desc>
        <line class="cr-spark-grid" x1="0" x2={SPARK_W} y1={SPARK_H / 2} y2={SPARK_H / 2} />
        {g.area && <path class="cr-spark-area" d={g.area} />}
        {g.line && <path class="cr-spark-line" d={g.line} />}
      </svg>
    </figure>
  );
}

function ConfigForm(props: {
  id: string;
  room: RoomView;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { id, room: r } = props;
  const [edits, setEdits] = useState<{ rate?: string; max_active?: string }>({});
  /** The settings a change just set, shown until the polled statistics catch up (≤ 3 s). */
  const [applied, setApplied] = useState<{ settings: Settings; at: number } | null>(null);
  const [errors, setErrors] = useState<Partial<Record<'rate' | 'max_active' | 'form', string>>>({});
  const [result, setResult] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const recent = applied && Date.now() - applied.at < 3000 ? applied.settings : null;
  const live = {
    rate: String(recent?.rate ?? r.rate ?? ''),
    max_active: String(recent?.max_active ?? r.max_active ?? ''),
  };
  const value = { rate: edits.rate ?? live.rate, max_active: edits.max_active ?? live.max_active };
  const dirty = edits.rate !== undefined || edits.max_active !== undefined;

  const edit = (field: 'rate' | 'max_active', v: string) => {
    setEdits((e) => ({ ...e, [field]: v }));
    setErrors((e) => ({ ...e, [field]: undefined, form: undefined }));
    setResult(null);
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    const patch = buildPatch(value, { rate: r.rate, max_active: r.max_active });
    if (Object.keys(patch).length === 0) {
      setEdits({});
      setResult('Nothing to change.');
      return;
    }
    setBusy(true);
    setErrors({});
    setResult(null);
    try {
      const res = await props.api.configure(r.room, patch);
      const changes = Object.keys(patch)
        .map((k) =>
          k === 'rate'
            ? `rate ${formatRate(r.rate)} → ${formatRate(res.settings.rate)}/s`
            : `max on the site ${formatCount(r.max_active)} → ${formatCount(res.settings.max_active)}`,
        )
        .join(', ');
      setApplied({ settings: res.settings, at: Date.now() });
      setEdits({});
      setResult(`Applied ${changes}; takes effect on the next admission pass.${auditNote(res.audit)}`);
      props.refresh();
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
      if (e.unauthorized) {
        props.onUnauthorized(e);
      } else if (e.field === 'rate' || e.field === 'max_active') {
        setErrors({ [e.field]: fieldMessage(e) });
        document.getElementById(`${id}-${e.field}`)?.focus();
      } else {
        setErrors({ form: `Not changed: ${e.message}` });
      }
    } finally {
      setBusy(false);
    }
  };

  const field = (name: 'rate' | 'max_active', label: string, unit: string, mode: 'decimal' | 'numeric') => {
    const err = errors[name];
    return (
      <div class={`cr-field${err ? ' cr-field-invalid' : ''}`}>
        <label for={`${id}-${name}`}>{label}</label>
        <div class="cr-input-unit">
          <input
            id={`${id}-${name}`}
            name={name}
            type="text"
            inputMode={mode}
            autocomplete="off"
            spellcheck={false}
            value={value[name]}
            aria-invalid={err ? 'true' : undefined}
            aria-describedby={err ? `${id}-${name}-error` : undefined}
            onInput={(ev) => edit(name, (ev.currentTarget as HTMLInputElement).value)}
          />
          <span class="cr-unit" aria-hidden="true">
            {unit}
          </span>
        </div>
        {err && (
          <p class="cr-field-error" id={`${id}-${name}-error`} data-field-error={name}>
            {err}
          </p>
        )}
      </div>
    );
  };

  return (
    <form class="cr-config" onSubmit={submit} noValidate aria-label={`Settings of ${r.room}`}>
      <div class="cr-config-fields">
        {field('rate', 'Rate (admitted per second)', '/s', 'decimal')}
        {field('max_active', 'Max on the site', 'sessions', 'numeric')}
        <div class="cr-config-buttons">
          <button type="submit" class="cr-btn cr-btn-primary" disabled={busy || !dirty}>
            {busy ? 'Applying…' : 'Apply'}
          </button>
          <button
            type="button"
            class="cr-btn"
            disabled={busy || !dirty}
            onClick={() => {
              setEdits({});
              setErrors({});
              setResult(null);
            }}
          >
            Reset
          </button>
        </div>
      </div>
      <div role="alert" class="cr-config-alert">
        {errors.form && <p class="cr-msg cr-msg-error">{errors.form}</p>}
        {(errors.rate || errors.max_active) && (
          <p class="cr-sr">Not changed: {errors.rate ? `rate: ${errors.rate}` : `max on the site: ${errors.max_active}`}</p>
        )}
      </div>
      <div role="status" aria-live="polite">
        {result && <p class="cr-msg cr-msg-ok">{result}</p>}
      </div>
    </form>
  );
}

function FlushDialog(props: {
  id: string;
  room: RoomView;
  api: Api;
  onClose: (result: { flushed: number; audit: { written: boolean; error?: string } } | null) => void;
  onUnauthorized: (e: ApiError) => void;
}) {
  const { id, room: r } = props;
  const dialog = useRef<HTMLDialogElement>(null);
  const [typed, setTyped] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const confirmed = typed.trim() === r.room;

  useEffect(() => {
    const d = dialog.current;
    if (d && !d.open) d.showModal();
    return () => {
      if (d?.open) d.close();
    };
  }, []);

  const submit = async (e: Event) => {
    e.preventDefault();
    if (!confirmed || busy) return;
    setBusy(true);
    setError(null);
    try {
      const res = await props.api.flush(r.room);
      props.onClose({ flushed: res.flushed, audit: res.audit });
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
      if (e.unauthorized) props.onUnauthorized(e);
      else setError(`Nothing was removed: ${e.message}`);
      setBusy(false);
    }
  };

  return (
    <dialog
      ref={dialog}
      class="cr-dialog"
      aria-labelledby={`${id}-flush-title`}
      aria-describedby={`${id}-flush-what`}
      onCancel={(e) => {
        e.preventDefault();
        props.onClose(null);
      }}
    >
      <form onSubmit={submit} noValidate>
        <h2 id={`${id}-flush-title`}>Empty the queue of “{r.room}”?</h2>
        <p id={`${id}-flush-what`}>
          This removes all {plural(r.waiting ?? 0, 'visitor', 'visitors')} now waiting in line. They lose their place
          and have to join again. Visitors already on the site are not affected. This cannot be undone.
        </p>
        <label for={`${id}-flush-confirm`}>
          Type the room name, <strong>{r.room}</strong>, to confirm
        </label>
        <input
          id={`${id}-flush-confirm`}
          type="text"
          autocomplete="off"
          spellcheck={false}
          autoFocus
          value={typed}
          onInput={(e) => setTyped((e.currentTarget as HTMLInputElement).value)}
        />
        {error && (
          <p class="cr-msg cr-msg-error" role="alert">
            {error}
          </p>
        )}
        <div class="cr-dialog-buttons">
          <button type="button" class="cr-btn" onClick={() => props.onClose(null)}>
            Cancel
          </button>
          <button type="submit" class="cr-btn cr-btn-danger" disabled={!confirmed || busy} data-action="confirm-flush">
            {busy ? 'Emptying…' : 'Empty the queue'}
          </button>
        </div>
      </form>
    </dialog>
  );
}
