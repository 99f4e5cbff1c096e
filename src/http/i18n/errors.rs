//! The error pages' strings, in every language of [`super::Lang`]: one [`ErrorText`]
//! (heading and body) per way the public listener refuses a request. The gate picks the
//! entry for its error kind; the page is rendered in the visitor's language like every
//! other page.
//!
//! Kept apart from [`super::Catalog`] because the waiting page's script never needs these:
//! the catalog is serialized into every waiting page, these strings are not.

use serde::Serialize;

/// The heading and body of one error page.
#[derive(Debug, Serialize)]
pub struct ErrorText {
    /// The page's heading (and `<title>`; the problem document's `title`).
    pub title: &'static str,
    /// The page's body (the problem document's `detail`).
    pub detail: &'static str,
}

/// One language's error pages.
#[derive(Debug, Serialize)]
pub struct Errors {
    /// An absolute-form request target.
    pub absolute_form: ErrorText,
    /// `CONNECT`.
    pub connect: ErrorText,
    /// A host that is not one valid name.
    pub bad_host: ErrorText,
    /// A path that cannot be resolved safely.
    pub bad_path: ErrorText,
    /// A trusted proxy's unreadable `X-Forwarded-For`.
    pub bad_forwarded_for: ErrorText,
    /// A CORS preflight with a body.
    pub preflight_body: ErrorText,
    /// Nothing at this reserved path.
    pub not_found: ErrorText,
    /// No room serves this host.
    pub unknown_site: ErrorText,
    /// A live stream from a browser with no place in line.
    pub not_in_line: ErrorText,
    /// The origin did not answer in time.
    pub origin_timeout: ErrorText,
    /// The origin could not be reached.
    pub origin_failed: ErrorText,
    /// The request cannot be forwarded as it is.
    pub unforwardable: ErrorText,
    /// Too many live streams are open.
    pub streams_full: ErrorText,
    /// This client holds too many live connections.
    pub too_many_streams: ErrorText,
    /// The request body came too slowly.
    pub body_timeout: ErrorText,
    /// Our own configuration is unusable.
    pub internal: ErrorText,
    /// The door is at its cap.
    pub busy: ErrorText,
    /// An asset or stream from a client not let in yet.
    pub not_admitted: ErrorText,
    /// The lottery draw cannot be read.
    pub draw_unavailable: ErrorText,
    /// A priority link that is not valid.
    pub bad_grant: ErrorText,
    /// The heading of the holding page while the store cannot be reached (its body is
    /// the catalog's `stalled_detail`).
    pub stalled_title: &'static str,
}

const fn e(title: &'static str, detail: &'static str) -> ErrorText {
    ErrorText { title, detail }
}

pub(super) static EN: Errors = Errors {
    absolute_form: e(
        "Bad request",
        "Absolute-form request targets are not accepted.",
    ),
    connect: e("Method not allowed", "CONNECT is not supported."),
    bad_host: e("Bad request", "The request does not name one valid host."),
    bad_path: e("Bad request", "The request path is not acceptable."),
    bad_forwarded_for: e(
        "Bad request",
        "The X-Forwarded-For header from the proxy cannot be read.",
    ),
    preflight_body: e("Bad request", "A CORS preflight carries no body."),
    not_found: e("Not found", "There is nothing here."),
    unknown_site: e("Unknown site", "This address is not served here."),
    not_in_line: e("Not in line", "There is no place in line for this browser."),
    origin_timeout: e(
        "Gateway timeout",
        "The site took too long to answer. Please try again shortly.",
    ),
    origin_failed: e(
        "Bad gateway",
        "The site could not be reached. Please try again shortly.",
    ),
    unforwardable: e("Bad request", "The request could not be forwarded."),
    streams_full: e(
        "Live updates unavailable",
        "Too many live updates are open; this page refreshes on its own instead.",
    ),
    too_many_streams: e(
        "Too many open connections",
        "This address holds too many live connections already.",
    ),
    body_timeout: e(
        "Request timeout",
        "The request body took too long to arrive.",
    ),
    internal: e(
        "Internal error",
        "This site is misconfigured here. Please try again later.",
    ),
    busy: e("Busy", "The site is busy: try again shortly."),
    not_admitted: e("Waiting", "This browser has not been let in yet."),
    draw_unavailable: e(
        "Draw unavailable",
        "The queue store is unavailable; try again.",
    ),
    bad_grant: e(
        "Priority link not valid",
        "This priority link has expired, was already used, or is not for this site.",
    ),
    stalled_title: "Please wait",
};

pub(super) static DE: Errors = Errors {
    absolute_form: e(
        "Ungültige Anfrage",
        "Anfrageziele in absoluter Form werden nicht angenommen.",
    ),
    connect: e("Methode nicht erlaubt", "CONNECT wird nicht unterstützt."),
    bad_host: e(
        "Ungültige Anfrage",
        "Die Anfrage nennt keinen gültigen Host.",
    ),
    bad_path: e(
        "Ungültige Anfrage",
        "Der Pfad der Anfrage ist nicht zulässig.",
    ),
    bad_forwarded_for: e(
        "Ungültige Anfrage",
        "Der X-Forwarded-For-Header des Proxys ist nicht lesbar.",
    ),
    preflight_body: e(
        "Ungültige Anfrage",
        "Eine CORS-Preflight-Anfrage hat keinen Inhalt.",
    ),
    not_found: e("Nicht gefunden", "Hier gibt es nichts."),
    unknown_site: e(
        "Unbekannte Website",
        "Diese Adresse wird hier nicht bedient.",
    ),
    not_in_line: e(
        "Nicht in der Warteschlange",
        "Für diesen Browser gibt es keinen Platz in der Warteschlange.",
    ),
    origin_timeout: e(
        "Zeitüberschreitung",
        "Die Website hat zu lange nicht geantwortet. Bitte versuchen Sie es gleich erneut.",
    ),
    origin_failed: e(
        "Website nicht erreichbar",
        "Die Website konnte nicht erreicht werden. Bitte versuchen Sie es gleich erneut.",
    ),
    unforwardable: e(
        "Ungültige Anfrage",
        "Die Anfrage konnte nicht weitergeleitet werden.",
    ),
    streams_full: e(
        "Live-Aktualisierung nicht verfügbar",
        "Zu viele Live-Aktualisierungen sind offen; diese Seite lädt sich stattdessen selbst neu.",
    ),
    too_many_streams: e(
        "Zu viele offene Verbindungen",
        "Diese Adresse hält bereits zu viele Live-Verbindungen.",
    ),
    body_timeout: e(
        "Zeitüberschreitung der Anfrage",
        "Der Inhalt der Anfrage kam zu langsam an.",
    ),
    internal: e(
        "Interner Fehler",
        "Diese Website ist hier falsch eingerichtet. Bitte versuchen Sie es später erneut.",
    ),
    busy: e(
        "Ausgelastet",
        "Die Website ist ausgelastet: Bitte versuchen Sie es gleich erneut.",
    ),
    not_admitted: e(
        "Bitte warten",
        "Dieser Browser wurde noch nicht eingelassen.",
    ),
    draw_unavailable: e(
        "Verlosung nicht verfügbar",
        "Die Warteschlange ist gerade nicht erreichbar; bitte erneut versuchen.",
    ),
    bad_grant: e(
        "Prioritätslink ungültig",
        "Dieser Prioritätslink ist abgelaufen, wurde schon benutzt oder gilt nicht für diese Website.",
    ),
    stalled_title: "Bitte warten",
};

pub(super) static ES: Errors = Errors {
    absolute_form: e(
        "Solicitud incorrecta",
        "No se aceptan destinos de solicitud en forma absoluta.",
    ),
    connect: e("Método no permitido", "CONNECT no está admitido."),
    bad_host: e(
        "Solicitud incorrecta",
        "La solicitud no indica un único host válido.",
    ),
    bad_path: e(
        "Solicitud incorrecta",
        "La ruta de la solicitud no es aceptable.",
    ),
    bad_forwarded_for: e(
        "Solicitud incorrecta",
        "No se puede leer la cabecera X-Forwarded-For del proxy.",
    ),
    preflight_body: e(
        "Solicitud incorrecta",
        "Una solicitud CORS preliminar no lleva cuerpo.",
    ),
    not_found: e("No encontrado", "Aquí no hay nada."),
    unknown_site: e("Sitio desconocido", "Esta dirección no se sirve aquí."),
    not_in_line: e(
        "No estás en la fila",
        "No hay un lugar en la fila para este navegador.",
    ),
    origin_timeout: e(
        "Tiempo de espera agotado",
        "El sitio tardó demasiado en responder. Vuelve a intentarlo en breve.",
    ),
    origin_failed: e(
        "Puerta de enlace incorrecta",
        "No se pudo conectar con el sitio. Vuelve a intentarlo en breve.",
    ),
    unforwardable: e("Solicitud incorrecta", "No se pudo reenviar la solicitud."),
    streams_full: e(
        "Actualizaciones en vivo no disponibles",
        "Hay demasiadas actualizaciones en vivo abiertas; esta página se recargará sola.",
    ),
    too_many_streams: e(
        "Demasiadas conexiones abiertas",
        "Esta dirección ya mantiene demasiadas conexiones en vivo.",
    ),
    body_timeout: e(
        "Tiempo de solicitud agotado",
        "El cuerpo de la solicitud tardó demasiado en llegar.",
    ),
    internal: e(
        "Error interno",
        "Este sitio está mal configurado aquí. Vuelve a intentarlo más tarde.",
    ),
    busy: e(
        "Ocupado",
        "El sitio está ocupado: vuelve a intentarlo en breve.",
    ),
    not_admitted: e("En espera", "Este navegador aún no ha sido admitido."),
    draw_unavailable: e(
        "Sorteo no disponible",
        "El almacén de la fila no está disponible; vuelve a intentarlo.",
    ),
    bad_grant: e(
        "Enlace prioritario no válido",
        "Este enlace prioritario ha caducado, ya se usó o no es para este sitio.",
    ),
    stalled_title: "Espera un momento",
};

pub(super) static FR: Errors = Errors {
    absolute_form: e(
        "Requête incorrecte",
        "Les cibles de requête en forme absolue ne sont pas acceptées.",
    ),
    connect: e("Méthode non autorisée", "CONNECT n'est pas pris en charge."),
    bad_host: e(
        "Requête incorrecte",
        "La requête ne nomme pas un seul hôte valide.",
    ),
    bad_path: e(
        "Requête incorrecte",
        "Le chemin de la requête n'est pas acceptable.",
    ),
    bad_forwarded_for: e(
        "Requête incorrecte",
        "L'en-tête X-Forwarded-For du proxy est illisible.",
    ),
    preflight_body: e(
        "Requête incorrecte",
        "Une requête CORS préliminaire n'a pas de corps.",
    ),
    not_found: e("Introuvable", "Il n'y a rien ici."),
    unknown_site: e("Site inconnu", "Cette adresse n'est pas servie ici."),
    not_in_line: e(
        "Pas dans la file",
        "Ce navigateur n'a pas de place dans la file.",
    ),
    origin_timeout: e(
        "Délai de passerelle dépassé",
        "Le site a mis trop de temps à répondre. Réessayez dans un instant.",
    ),
    origin_failed: e(
        "Passerelle incorrecte",
        "Le site est injoignable. Réessayez dans un instant.",
    ),
    unforwardable: e(
        "Requête incorrecte",
        "La requête n'a pas pu être transmise.",
    ),
    streams_full: e(
        "Mises à jour en direct indisponibles",
        "Trop de mises à jour en direct sont ouvertes ; cette page se rafraîchit toute seule à la place.",
    ),
    too_many_streams: e(
        "Trop de connexions ouvertes",
        "Cette adresse tient déjà trop de connexions en direct.",
    ),
    body_timeout: e(
        "Délai de requête dépassé",
        "Le corps de la requête a mis trop de temps à arriver.",
    ),
    internal: e(
        "Erreur interne",
        "Ce site est mal configuré ici. Veuillez réessayer plus tard.",
    ),
    busy: e("Occupé", "Le site est occupé : réessayez dans un instant."),
    not_admitted: e("En attente", "Ce navigateur n'a pas encore été admis."),
    draw_unavailable: e(
        "Tirage indisponible",
        "Le stockage de la file est indisponible ; réessayez.",
    ),
    bad_grant: e(
        "Lien prioritaire non valide",
        "Ce lien prioritaire a expiré, a déjà servi ou n'est pas pour ce site.",
    ),
    stalled_title: "Veuillez patienter",
};

pub(super) static AR: Errors = Errors {
    absolute_form: e("طلب غير صالح", "لا تُقبل أهداف الطلبات بالصيغة المطلقة."),
    connect: e("الطريقة غير مسموح بها", "طريقة CONNECT غير مدعومة."),
    bad_host: e("طلب غير صالح", "لا يسمّي الطلب مضيفًا صالحًا واحدًا."),
    bad_path: e("طلب غير صالح", "مسار الطلب غير مقبول."),
    bad_forwarded_for: e(
        "طلب غير صالح",
        "تتعذر قراءة ترويسة X-Forwarded-For القادمة من الوكيل.",
    ),
    preflight_body: e("طلب غير صالح", "طلب CORS التمهيدي لا يحمل محتوى."),
    not_found: e("غير موجود", "لا يوجد شيء هنا."),
    unknown_site: e("موقع غير معروف", "هذا العنوان لا يُخدم هنا."),
    not_in_line: e(
        "لست في قائمة الانتظار",
        "لا يوجد مكان في قائمة الانتظار لهذا المتصفح.",
    ),
    origin_timeout: e(
        "انتهت مهلة البوابة",
        "استغرق الموقع وقتًا طويلًا للرد. يُرجى المحاولة بعد قليل.",
    ),
    origin_failed: e(
        "خطأ في البوابة",
        "تعذر الوصول إلى الموقع. يُرجى المحاولة بعد قليل.",
    ),
    unforwardable: e("طلب غير صالح", "تعذر تمرير الطلب."),
    streams_full: e(
        "التحديثات المباشرة غير متاحة",
        "هناك تحديثات مباشرة مفتوحة كثيرة جدًا؛ ستتحدث هذه الصفحة تلقائيًا بدلًا من ذلك.",
    ),
    too_many_streams: e(
        "اتصالات مفتوحة كثيرة جدًا",
        "يحتفظ هذا العنوان بعدد كبير جدًا من الاتصالات المباشرة.",
    ),
    body_timeout: e("انتهت مهلة الطلب", "استغرق وصول محتوى الطلب وقتًا طويلًا."),
    internal: e(
        "خطأ داخلي",
        "إعدادات هذا الموقع هنا غير صحيحة. يُرجى المحاولة لاحقًا.",
    ),
    busy: e("مشغول", "الموقع مشغول: يُرجى المحاولة بعد قليل."),
    not_admitted: e("في الانتظار", "لم يُسمح لهذا المتصفح بالدخول بعد."),
    draw_unavailable: e(
        "القرعة غير متاحة",
        "مخزن قائمة الانتظار غير متاح؛ حاول مرة أخرى.",
    ),
    bad_grant: e(
        "رابط الأولوية غير صالح",
        "انتهت صلاحية رابط الأولوية هذا أو استُخدم من قبل أو أنه ليس لهذا الموقع.",
    ),
    stalled_title: "يُرجى الانتظار",
};
