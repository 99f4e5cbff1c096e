// The control room: sign in with the admin token, then a tile per room, polled every
// second, with the controls an incident needs, and the Queue view (the head of each line,
// a search by reference, move to the front; Queue.tsx), and the Bans view (Bans.tsx); a
// room's tile is Room.tsx. See
// docs/admin-api.md, and docs/security.md "Priority" and "Bans and the abuse registry".
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import {
  Api,
  ApiError,
  clearToken,
  loadToken,
  saveToken,
  type RoomView,
  type Status,
} from './api';
import { BansView } from './Bans';
import { QueueView } from './Queue';
import { RoomTile } from './Room';
import { formatAge, formatClock, formatDuration } from './format';
import { addSample, type Sample } from './sparkline';

/** How often the rooms and the status are read. */
export const POLL_MS = 1000;
/** A poll that has not answered in this long counts as failed. */
const POLL_TIMEOUT_MS = 5000;

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
