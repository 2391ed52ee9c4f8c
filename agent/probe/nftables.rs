//! Facts from `nft list table ip kube-proxy` (kube-proxy in nftables mode).
//!
//! The text is nft's own rendering (TABs, or spaces when someone pasted it):
//!
//! ```text
//! table ip kube-proxy {                      # handle 18   (with `nft -a`)
//!     comment "rules for kube-proxy"
//!     map service-ips {
//!         type ipv4_addr . inet_proto . inet_service : verdict
//!         comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
//!         elements = { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80,
//!                      172.30.0.42 . tcp . 80 : goto service-42NFTM6N-ns2/svc2/tcp/p80 }
//!     }
//!     chain nat-prerouting {
//!         type nat hook prerouting priority dstnat; policy accept;
//!         jump services
//!     }
//! }
//! ```
//!
//! [`parse_list_table`] counts chains, rules, sets, maps and the elements of
//! every set and map. It is strict: a block that is never closed (a truncated
//! listing) or a line it does not understand is a [`ParseError`].

use std::collections::BTreeMap;

use crate::parse::{quote, ParseError};

/// Counts for one nftables table as `nft list table` shows it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NftTableCounts {
    /// Chains in the table, base and regular, in chains.
    pub chains: u64,
    /// Base chains (with `type ... hook ... priority ...;`), in chains.
    pub base_chains: u64,
    /// Rules over all chains (statement lines, not the hook/policy/comment lines), in rules.
    pub rules: u64,
    /// kube-proxy per-service-port chains, `service-<8 base32 chars>-...`, in chains.
    pub service_chains: u64,
    /// kube-proxy per-endpoint chains, `endpoint-<8 base32 chars>-...`, in chains.
    pub endpoint_chains: u64,
    /// kube-proxy external-traffic chains, `external-<8 base32 chars>-...`, in chains.
    pub external_chains: u64,
    /// kube-proxy local-endpoint chains (internalTrafficPolicy / externalTrafficPolicy
    /// Local), `local-<8 base32 chars>-...`, in chains.
    #[serde(default)]
    pub local_chains: u64,
    /// Named sets (`set NAME { ... }`), in sets.
    pub sets: u64,
    /// Named maps, including verdict maps (`map NAME { ... }`), in maps.
    pub maps: u64,
    /// Elements of each named map, keyed by map name (`service-ips`, `service-nodeports`,
    /// `no-endpoint-services`, `firewall-ips`...); 0 for a map listed without elements, in elements.
    pub map_elements: BTreeMap<String, u64>,
    /// Elements of each named set, keyed by set name (`cluster-ips`, `nodeport-ips`,
    /// `affinity-*`...), in elements.
    pub set_elements: BTreeMap<String, u64>,
}

/// Longest line accepted, in bytes. nft prints a whole anonymous vmap of a service
/// on one line (one `N : goto endpoint-...` per endpoint, ~90 bytes each).
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Object kinds nft may list inside a table that kube-proxy does not create;
/// their bodies are skipped.
const OTHER_OBJECTS: &[&str] = &["counter", "quota", "limit", "ct", "flowtable", "secmark", "synproxy"];

/// Where the parser is.
enum State {
    /// Before `table ... {`.
    Start,
    /// Inside the table body.
    Table,
    /// Inside `set NAME {` or `map NAME {`.
    Set { name: String, is_map: bool },
    /// Inside `elements = { ...` that spans lines.
    Elements { name: String, is_map: bool, scan: Scan },
    /// Inside `chain NAME {`.
    Chain,
    /// Inside a rule whose braces span lines (depth > 0).
    RuleCont { scan: Scan },
    /// Inside an object body that is skipped, with its brace depth.
    Other { scan: Scan },
    /// After the table's closing `}`.
    Done,
}

/// Brace depth, top-level commas and whether anything sits inside the outer braces.
#[derive(Default)]
struct Scan {
    depth: u64,
    commas: u64,
    nonempty: bool,
}

impl Scan {
    /// Scans `text` (outside double-quoted strings) until the outer braces close.
    /// Returns the byte index just after the closing brace, or None if still open.
    fn feed(&mut self, text: &str) -> Result<Option<usize>, String> {
        let mut in_quote = false;
        let mut escaped = false;
        for (i, ch) in text.char_indices() {
            if in_quote {
                self.nonempty = true;
                if escaped {
                    escaped = false;
                } else if ch == '\\' {
                    escaped = true;
                } else if ch == '"' {
                    in_quote = false;
                }
                continue;
            }
            match ch {
                '"' => {
                    in_quote = true;
                    self.nonempty |= self.depth > 0;
                }
                '{' => {
                    self.depth += 1;
                    self.nonempty |= self.depth > 1;
                }
                '}' => {
                    if self.depth == 0 {
                        return Err("unbalanced `}`".to_string());
                    }
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Ok(Some(i + 1));
                    }
                    self.nonempty = true;
                }
                ',' if self.depth == 1 => self.commas += 1,
                c if !c.is_whitespace() && self.depth > 0 => self.nonempty = true,
                _ => {}
            }
        }
        if in_quote {
            return Err("unterminated string".to_string());
        }
        Ok(None)
    }

    fn elements(&self) -> u64 {
        if self.nonempty {
            self.commas + 1
        } else {
            0
        }
    }
}

/// Removes a `# ...` comment (nft's `# handle N`) that is outside double quotes.
fn strip_comment(line: &str) -> &str {
    let mut in_quote = false;
    let mut escaped = false;
    for (i, ch) in line.char_indices() {
        if in_quote {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_quote = false;
            }
        } else if ch == '"' {
            in_quote = true;
        } else if ch == '#' {
            return &line[..i];
        }
    }
    line
}

/// `KEYWORD NAME {` → `NAME` (quotes removed), or None if the line is not that shape.
fn block_name<'a>(line: &'a str, keyword: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(keyword)?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let name = rest.trim().strip_suffix('{')?.trim_end();
    let name = name.strip_prefix('"').and_then(|n| n.strip_suffix('"')).unwrap_or(name);
    if name.is_empty() || name.contains(char::is_whitespace) && !rest.trim_start().starts_with('"') {
        return None;
    }
    Some(name)
}

/// Whether `name` is `<prefix><8 base32 chars>-...`, kube-proxy's per-service chain naming.
fn is_hashed(name: &str, prefix: &str) -> bool {
    match name.strip_prefix(prefix) {
        Some(rest) => {
            let b = rest.as_bytes();
            b.len() > 9
                && b[..8]
                    .iter()
                    .all(|c| c.is_ascii_uppercase() || (b'2'..=b'7').contains(c))
                && b[8] == b'-'
        }
        None => false,
    }
}

/// Parses the text output of `nft list table ip kube-proxy` (with or without `-a`).
pub fn parse_list_table(source_name: &str, text: &str) -> Result<NftTableCounts, ParseError> {
    let mut counts = NftTableCounts::default();
    let mut state = State::Start;
    // Line where the innermost block still open was opened.
    let mut table_line = 0usize;
    let mut block_line = 0usize;
    let mut last_line = 0usize;

    for (idx, raw) in text.lines().enumerate() {
        let n = idx + 1;
        last_line = n;
        let err = |m: String| ParseError::new(source_name, n, m);
        if raw.len() > MAX_LINE_BYTES {
            return Err(err(format!(
                "line is {} bytes long, more than the {MAX_LINE_BYTES} accepted",
                raw.len()
            )));
        }
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        state = match state {
            State::Start => {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["table", _, _, "{"] | ["table", _, "{"] => {
                        table_line = n;
                        State::Table
                    }
                    _ => return Err(err(format!("expected `table FAMILY NAME {{`, found {}", quote(line)))),
                }
            }
            State::Table => {
                if line == "}" {
                    State::Done
                } else if line.starts_with("comment ") || line.starts_with("flags ") {
                    State::Table
                } else if let Some(name) = block_name(line, "set").or_else(|| block_name(line, "map")) {
                    let is_map = line.starts_with("map");
                    if is_map {
                        counts.maps += 1;
                        counts.map_elements.insert(name.to_string(), 0);
                    } else {
                        counts.sets += 1;
                        counts.set_elements.insert(name.to_string(), 0);
                    }
                    block_line = n;
                    State::Set {
                        name: name.to_string(),
                        is_map,
                    }
                } else if let Some(name) = block_name(line, "chain") {
                    counts.chains += 1;
                    if is_hashed(name, "service-") {
                        counts.service_chains += 1;
                    } else if is_hashed(name, "endpoint-") {
                        counts.endpoint_chains += 1;
                    } else if is_hashed(name, "external-") {
                        counts.external_chains += 1;
                    } else if is_hashed(name, "local-") {
                        counts.local_chains += 1;
                    }
                    block_line = n;
                    State::Chain
                } else if OTHER_OBJECTS
                    .iter()
                    .any(|k| line.strip_prefix(k).is_some_and(|r| r.starts_with(' ')) && line.ends_with('{'))
                {
                    let mut scan = Scan::default();
                    scan.feed(line).map_err(err)?;
                    block_line = n;
                    State::Other { scan }
                } else {
                    return Err(err(format!(
                        "expected `set`, `map`, `chain` or `}}` in the table body, found {}",
                        quote(line)
                    )));
                }
            }
            State::Set { name, is_map } => {
                if line == "}" {
                    State::Table
                } else if let Some(rest) = line.strip_prefix("elements") {
                    let rest = rest.trim_start();
                    let Some(rest) = rest.strip_prefix('=') else {
                        return Err(err(format!("expected `elements = {{`, found {}", quote(line))));
                    };
                    let rest = rest.trim_start();
                    if !rest.starts_with('{') {
                        return Err(err(format!("expected `elements = {{`, found {}", quote(line))));
                    }
                    let mut scan = Scan::default();
                    match scan.feed(rest).map_err(err)? {
                        Some(end) => {
                            if !rest[end..].trim().is_empty() {
                                return Err(err(format!("unexpected text after elements: {}", quote(&rest[end..]))));
                            }
                            record(&mut counts, &name, is_map, scan.elements());
                            State::Set { name, is_map }
                        }
                        None => State::Elements { name, is_map, scan },
                    }
                } else {
                    // A property: type, typeof, flags, timeout, size, policy, comment, counter...
                    let mut scan = Scan::default();
                    scan.feed(line).map_err(err)?;
                    if scan.depth != 0 {
                        return Err(err(format!("unclosed `{{` in set property {}", quote(line))));
                    }
                    State::Set { name, is_map }
                }
            }
            State::Elements { name, is_map, mut scan } => match scan.feed(line).map_err(err)? {
                Some(end) => {
                    if !line[end..].trim().is_empty() {
                        return Err(err(format!("unexpected text after elements: {}", quote(&line[end..]))));
                    }
                    record(&mut counts, &name, is_map, scan.elements());
                    State::Set { name, is_map }
                }
                None => State::Elements { name, is_map, scan },
            },
            State::Chain => {
                if line == "}" {
                    State::Table
                } else if line.starts_with("type ") && line.contains(" hook ") {
                    counts.base_chains += 1;
                    State::Chain
                } else if line.starts_with("policy ") || line.starts_with("comment \"") || line.starts_with("devices ")
                {
                    State::Chain
                } else {
                    counts.rules += 1;
                    let mut scan = Scan::default();
                    match scan.feed(line).map_err(err)? {
                        None if scan.depth > 0 => State::RuleCont { scan },
                        _ => {
                            if scan.depth != 0 {
                                return Err(err(format!("unbalanced braces in rule {}", quote(line))));
                            }
                            State::Chain
                        }
                    }
                }
            }
            State::RuleCont { mut scan } => {
                // Continue the rule until its braces close.
                match scan.feed(line).map_err(err)? {
                    Some(end) => {
                        let mut rest = Scan::default();
                        rest.feed(&line[end..]).map_err(err)?;
                        if rest.depth > 0 {
                            State::RuleCont { scan: rest }
                        } else {
                            State::Chain
                        }
                    }
                    None => State::RuleCont { scan },
                }
            }
            State::Other { mut scan } => match scan.feed(line).map_err(err)? {
                Some(_) => State::Table,
                None => State::Other { scan },
            },
            State::Done => {
                return Err(err(format!(
                    "unexpected text after the table's closing `}}`: {}",
                    quote(line)
                )));
            }
        };
    }

    let open = |what: &str, line: usize| {
        ParseError::new(
            source_name,
            last_line,
            format!("end of input inside {what} opened on line {line}: missing closing `}}` (truncated listing?)"),
        )
    };
    match state {
        State::Done => Ok(counts),
        State::Start => Err(ParseError::whole(source_name, "no `table` in the output")),
        State::Table => Err(open("the table", table_line)),
        State::Set { .. } | State::Elements { .. } => Err(open("a set or map", block_line)),
        State::Chain | State::RuleCont { .. } => Err(open("a chain", block_line)),
        State::Other { .. } => Err(open("an object", block_line)),
    }
}

fn record(counts: &mut NftTableCounts, name: &str, is_map: bool, elements: u64) {
    let map = if is_map {
        &mut counts.map_elements
    } else {
        &mut counts.set_elements
    };
    *map.entry(name.to_string()).or_insert(0) += elements;
}

// ---------------------------------------------------------------------------
// The same counts over netlink, on the node itself.

/// kube-proxy's table name in nftables mode (in both the ip and ip6 families).
pub const TABLE: &str = "kube-proxy";

/// Counts kube-proxy's table from nf_tables messages, as [`parse_list_table`]
/// counts `nft list table`: chains (base ones have a hook), rules, named sets
/// and maps (nft lists no block for an anonymous set), elements as nft lists them.
#[derive(Debug, Default)]
pub struct NftTally {
    found: bool,
    counts: NftTableCounts,
}

impl NftTally {
    /// The counts; None when the table does not exist.
    pub fn finish(self) -> Option<NftTableCounts> {
        self.found.then_some(self.counts)
    }
}

impl crate::netlink::nft_count::Tally for NftTally {
    fn wants(&self, table: &str) -> bool {
        table == TABLE
    }

    fn table(&mut self, _: &str) {
        self.found = true;
    }

    fn chain(&mut self, c: &crate::netlink::nft::Chain<'_>) -> Result<(), crate::netlink::NlError> {
        let n = &mut self.counts;
        n.chains += 1;
        n.base_chains += u64::from(c.base);
        if is_hashed(c.name, "service-") {
            n.service_chains += 1;
        } else if is_hashed(c.name, "endpoint-") {
            n.endpoint_chains += 1;
        } else if is_hashed(c.name, "external-") {
            n.external_chains += 1;
        } else if is_hashed(c.name, "local-") {
            n.local_chains += 1;
        }
        Ok(())
    }

    fn rule(&mut self, _: &crate::netlink::nft::Rule<'_>) -> Result<(), crate::netlink::NlError> {
        self.counts.rules += 1;
        Ok(())
    }

    fn set(&mut self, s: &crate::netlink::nft::Set<'_>) -> bool {
        let n = &mut self.counts;
        if s.is_map() {
            n.maps += 1;
            n.map_elements.insert(s.name.to_string(), 0);
        } else {
            n.sets += 1;
            n.set_elements.insert(s.name.to_string(), 0);
        }
        true
    }

    fn elements(&mut self, _: &str, set: &str, k: u64) {
        let n = &mut self.counts;
        if let Some(e) = n.map_elements.get_mut(set) {
            *e += k;
        } else if let Some(e) = n.set_elements.get_mut(set) {
            *e += k;
        }
    }
}

/// Both families' tables over netlink (blocking): reused at an unchanged generation.
#[allow(clippy::type_complexity)]
fn count_tables(
    host: &crate::host::Host,
    memory: &super::Memory,
    deadline: std::time::Instant,
) -> Result<Vec<(Option<NftTableCounts>, super::counted::NetlinkCount)>, super::ProbeError> {
    use crate::netlink::nft::Family;
    use crate::netlink::{nft_count, NETLINK_NETFILTER};
    super::counted::counts_now(host, &memory.nftables, &[Family::Ip, Family::Ip6], deadline, |family| {
        let plan = nft_count::Plan { family, sets: true };
        let c = nft_count::count(
            &mut || host.netlink(NETLINK_NETFILTER),
            plan,
            deadline,
            &NftTally::default,
        )?;
        Ok((c.tally.finish(), c.generation, c.attempts, c.bytes))
    })
    .map_err(|(family, e)| {
        super::ProbeError::NfNetlink(format!(
            "nf_tables over netlink, table {} {TABLE}: {e}",
            family.as_str()
        ))
    })
}

// ---------------------------------------------------------------------------
// The probe.

/// One kube-proxy table, as counted.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NftTable {
    /// `ipv4` or `ipv6`: the address family, as in every other metric label and key (nft
    /// names the table's family `ip` or `ip6`: [`NftTable::nft_family`]).
    pub family: String,
    /// Wall time of reading the table (`nft list table`, or the netlink count), in seconds.
    pub duration_seconds: f64,
    /// Bytes read: of the listing, or of the netlink messages.
    pub bytes: u64,
    pub counts: NftTableCounts,
    /// For a netlink count: at which generation and when it was made, and whether reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netlink: Option<super::counted::NetlinkCount>,
}

impl NftTable {
    /// nft's name of the table's family (`ip`, `ip6`), as in `nft list table ip kube-proxy`.
    pub fn nft_family(&self) -> &'static str {
        if self.family == "ipv6" {
            "ip6"
        } else {
            "ip"
        }
    }
}

/// The address family (`ipv4`, `ipv6`) of an nft family name (`ip`, `ip6`).
pub fn address_family(nft_family: &str) -> &'static str {
    if nft_family == "ip6" {
        "ipv6"
    } else {
        "ipv4"
    }
}

/// A table's `family` key as read from JSON: `ipv4`/`ipv6`, or the `ip`/`ip6` of documents
/// written before the family vocabulary was unified (docs/upgrading.md).
pub fn address_family_of_key(key: &str) -> &str {
    match key {
        "ip" => "ipv4",
        "ip6" => "ipv6",
        other => other,
    }
}

/// What `facts.nftables` holds: kube-proxy's nftables-mode tables.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NftablesFacts {
    pub tables: Vec<NftTable>,
}

const NO_TABLE: &str = "no kube-proxy nftables table (kube-proxy is not in nftables mode)";

/// Reads kube-proxy's table in each family: over netlink on the node itself,
/// with `nft list table` on a fixture host root. Both families share the deadline.
pub async fn probe(
    ctx: &super::ProbeContext,
    deadline: super::Deadline,
) -> Result<super::Probed<NftablesFacts>, super::ProbeError> {
    use super::{ProbeName, Probed};
    use crate::netlink::nft::Family;
    if !ctx.host.kernel().netlink() {
        return probe_with_nft(ctx, deadline).await;
    }
    // One trip to the blocking pool: the gate, one generation read and,
    // unless reused, the counts.
    let (host, memory, at) = (ctx.host.clone(), ctx.memory.clone(), deadline.at());
    let started = std::time::Instant::now();
    let counted = super::blocking(ProbeName::Nftables, move || {
        if super::modules::tool_would_load(&host, "nf_tables") {
            return Ok(None);
        }
        count_tables(&host, &memory, at).map(Some)
    })
    .await?;
    let Some(counted) = counted else {
        return Ok(Probed::Absent(
            "nf_tables is not loaded (nothing was asked, so nothing was loaded): no kube-proxy nftables table".into(),
        ));
    };
    let elapsed = started.elapsed().as_secs_f64();
    let mut tables = Vec::new();
    for (family, (counts, how)) in [Family::Ip, Family::Ip6].into_iter().zip(counted) {
        if let Some(counts) = counts {
            tables.push(NftTable {
                family: address_family(family.as_str()).to_string(),
                duration_seconds: if how.reused { elapsed } else { how.count_seconds },
                bytes: how.bytes,
                counts,
                netlink: Some(how),
            });
        }
    }
    if tables.is_empty() {
        return Ok(Probed::Absent(NO_TABLE.into()));
    }
    Ok(Probed::Present(NftablesFacts { tables }))
}

/// A fixture host root: `nft list table` per family, as before.
async fn probe_with_nft(
    ctx: &super::ProbeContext,
    deadline: super::Deadline,
) -> Result<super::Probed<NftablesFacts>, super::ProbeError> {
    if !crate::exec::on_path("nft") {
        return Ok(super::Probed::Absent("nft not on PATH".into()));
    }
    // nft asks nf_tables over nfnetlink: with nf_tables not loaded the kernel
    // would load both to answer. No table can exist then.
    let host = ctx.host.clone();
    if super::blocking(super::ProbeName::Nftables, move || {
        Ok(super::modules::tool_would_load(&host, "nf_tables"))
    })
    .await?
    {
        return Ok(super::Probed::Absent(
            "nf_tables is not loaded, so there is no kube-proxy nftables table; nft was not run (it would load the module)"
                .into(),
        ));
    }
    let hint = "needs CAP_NET_ADMIN";
    // Ask for each table by name: `nft list tables` reads every rule of every
    // table first, which takes minutes on a large iptables-nft node.
    let mut tables = Vec::new();
    for family in ["ip", "ip6"] {
        let spec = crate::exec::CommandSpec::new("nft", &["list", "table", family, TABLE])
            .dump()
            .timeout(deadline.remaining())
            .max_output_bytes(ctx.max_output_bytes)
            .permission_hint(hint);
        let (text, fin) = ctx.runner.run_capture(&spec).await?;
        if !fin.status.success() && fin.stderr_head.contains("No such file or directory") {
            continue; // no such table in this family
        }
        crate::exec::ExecError::check_status(&spec, &fin)?;
        let counts = parse_list_table(&spec.display(), &text)?;
        tables.push(NftTable {
            family: address_family(family).to_string(),
            duration_seconds: fin.duration.as_secs_f64(),
            bytes: fin.stdout_bytes,
            counts,
            netlink: None,
        });
    }
    if tables.is_empty() {
        return Ok(super::Probed::Absent(NO_TABLE.into()));
    }
    Ok(super::Probed::Present(NftablesFacts { tables }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a file of tests/fixtures/nft/ (relative to the crate root).
    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/fixtures/nft/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    const MODEL: &str =
        "list-table-ip-kube-proxy-debian12-nft1.0.6-kernel6.18-model-of-k8s-TestOverallNFTablesRules.txt";
    const MODEL_HANDLES: &str = "list-table-ip-kube-proxy-handles-debian12-nft1.0.6-kernel6.18-model.txt";
    const K3S_SPACES: &str = "list-table-ip-kube-proxy-k3s-real-capture-older-layout-spaces-not-tabs.txt";
    const GCE_TRUNCATED: &str = "list-table-kube-proxy-handles-gce-real-capture-truncated.txt";
    const OWN: &str = "list-table-ip-kube-proxy-pwgen-50svc-debian12-nft1.0.6.txt";
    const OWN_HANDLES: &str = "list-table-ip-kube-proxy-handles-pwgen-50svc-debian12-nft1.0.6.txt";

    fn elements(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// Counts checked against `nft -j list table` of the same table (the -json fixture).
    fn model_counts() -> NftTableCounts {
        NftTableCounts {
            chains: 32,
            base_chains: 8,
            rules: 57,
            service_chains: 5,
            endpoint_chains: 6,
            external_chains: 4,
            local_chains: 0,
            sets: 3,
            maps: 5,
            map_elements: elements(&[
                ("firewall-ips", 1),
                ("no-endpoint-nodeports", 1),
                ("no-endpoint-services", 3),
                ("service-ips", 9),
                ("service-nodeports", 3),
            ]),
            set_elements: elements(&[
                ("affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80", 0),
                ("cluster-ips", 6),
                ("nodeport-ips", 1),
            ]),
        }
    }

    #[test]
    fn model_tabs() {
        assert_eq!(parse_list_table(MODEL, &fixture(MODEL)).unwrap(), model_counts());
    }

    #[test]
    fn model_with_handles_gives_same_counts() {
        assert_eq!(
            parse_list_table(MODEL_HANDLES, &fixture(MODEL_HANDLES)).unwrap(),
            model_counts()
        );
    }

    #[test]
    fn k3s_spaces_not_tabs() {
        let c = parse_list_table(K3S_SPACES, &fixture(K3S_SPACES)).unwrap();
        assert_eq!(c.map_elements["service-ips"], 9);
        assert_eq!(c.map_elements["service-nodeports"], 1);
        assert_eq!(
            c.map_elements["no-endpoint-services"], 2,
            "commas inside comment strings"
        );
        assert_eq!(c.map_elements["no-endpoint-nodeports"], 0);
        assert_eq!(c.map_elements["firewall-ips"], 0);
        assert_eq!(c.set_elements["cluster-ips"], 7);
        assert_eq!(c.set_elements["nodeport-ips"], 1);
        assert_eq!((c.sets, c.maps), (2, 5));
        assert_eq!(c.base_chains, 8);
        // Checked with an independent line count of the file.
        assert_eq!((c.chains, c.rules), (43, 77));
        assert_eq!((c.service_chains, c.endpoint_chains, c.external_chains), (9, 17, 1));
    }

    #[test]
    fn gce_truncated_is_an_error() {
        let text = fixture(GCE_TRUNCATED);
        let e = parse_list_table(GCE_TRUNCATED, &text).unwrap_err();
        assert!(e.message.contains("missing closing `}`"), "{e}");
        assert_eq!(e.line, text.lines().count());
    }

    /// Loaded with `nft -f` in a throwaway netns: see tests/fixtures/nft/SOURCES.md.
    fn own_counts() -> NftTableCounts {
        NftTableCounts {
            chains: 16 + 50 + 100 + 10,
            base_chains: 8,
            rules: 23 + 50 * 2 + 100 * 2 + 10 * 2,
            service_chains: 50,
            endpoint_chains: 100,
            external_chains: 10,
            local_chains: 0,
            sets: 2,
            maps: 5,
            map_elements: elements(&[
                ("firewall-ips", 0),
                ("no-endpoint-nodeports", 0),
                ("no-endpoint-services", 3),
                ("service-ips", 50),
                ("service-nodeports", 10),
            ]),
            set_elements: elements(&[("cluster-ips", 53), ("nodeport-ips", 1)]),
        }
    }

    #[test]
    fn own_capture_50_services() {
        assert_eq!(parse_list_table(OWN, &fixture(OWN)).unwrap(), own_counts());
        assert_eq!(
            parse_list_table(OWN_HANDLES, &fixture(OWN_HANDLES)).unwrap(),
            own_counts()
        );
    }

    #[test]
    fn elements_with_nested_braces_and_quoted_commas() {
        let text = "table ip kube-proxy {\n\tmap m {\n\t\ttype ipv4_addr : verdict\n\t\telements = { 1.2.3.4 comment \"a, b } {\" : goto x,\n\t\t\t     { 5.6.7.8, 9.9.9.9 } : drop, 10.0.0.1 : jump y }\n\t}\n\tset empty {\n\t\ttype ipv4_addr\n\t\telements = { }\n\t}\n}\n";
        let c = parse_list_table("t", text).unwrap();
        assert_eq!(c.map_elements["m"], 3);
        assert_eq!(c.set_elements["empty"], 0);
    }

    #[test]
    fn multi_line_rule_counts_once() {
        let text = "table ip t {\n\tchain c {\n\t\tnumgen random mod 2 vmap { 0 : goto a,\n\t\t\t1 : goto b }\n\t\taccept\n\t}\n}\n";
        let c = parse_list_table("t", text).unwrap();
        assert_eq!((c.chains, c.rules), (1, 2));
    }

    #[test]
    fn errors() {
        let e = parse_list_table("t", "").unwrap_err();
        assert_eq!(e.line, 0);
        let e = parse_list_table("t", "table ip t {\n\tbogus line\n}\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_list_table("t", "table ip t {\n}\ntable ip u {\n}\n").unwrap_err();
        assert_eq!(e.line, 3);
        let e = parse_list_table("t", "table ip t {\n\tset s {\n\t\telements = { 1,\n").unwrap_err();
        assert!(e.message.contains("opened on line 2"), "{e}");
        let e = parse_list_table("t", "table ip t {\n\tchain c {\n\t\tip daddr \"x\n\t}\n}\n").unwrap_err();
        assert_eq!(e.line, 3);
        let e = parse_list_table("t", "hello\n").unwrap_err();
        assert_eq!(e.line, 1);
    }
}
