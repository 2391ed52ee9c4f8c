use super::testing::*;
use super::*;

#[test]
fn framing_round_trip_and_garbage() {
    let a = [string(1, "nat"), be32(2, 7), nested(3, &[string(1, "x")])].concat();
    let d = [msg(0x0a03, NLM_F_MULTI, 5, &nfgen_payload(2, 9, &[a])), done(5)].concat();
    let ms: Vec<Msg> = messages(&d).map(Result::unwrap).collect();
    assert_eq!(ms.len(), 2);
    assert_eq!((ms[0].ty, ms[0].seq, ms[1].ty), (0x0a03, 5, NLMSG_DONE));
    let (fam, res, at) = nfgen(ms[0].payload).unwrap();
    let at: Vec<Attr> = at.map(Result::unwrap).collect();
    assert_eq!((fam, res, at.len()), (2, 9, 3));
    assert_eq!(at[0].str().unwrap(), "nat");
    assert_eq!(at[1].be_u32().unwrap(), 7);
    assert_eq!(at[2].kind, 3, "the nested flag is masked off");
    assert_eq!(at[2].nested().next().unwrap().unwrap().str().unwrap(), "x");
    assert!(at[0].be_u64().is_err() && at[1].be_u64().is_err());
    // Cut anywhere: an error, never a panic, never a message past the end.
    for cut in 0..d.len() {
        for m in messages(&d[..cut]).flatten() {
            for a in attrs(m.payload.get(4..).unwrap_or(&[])) {
                let _ = a.map(|a| (a.str(), a.be_u32()));
            }
        }
    }
    assert!(matches!(messages(&d[..10]).next(), Some(Err(NlError::Malformed(_)))));
    let mut bad = d.clone();
    bad[0..4].copy_from_slice(&1000u32.to_ne_bytes());
    assert!(messages(&bad).next().unwrap().is_err());
    assert!(nfgen(&[1, 2]).is_err());
}

#[test]
fn request_bytes() {
    let mut r = Request::new(0x0a07, NLM_F_REQUEST | NLM_F_DUMP, 2).string(1, "nat");
    let b = r.bytes(42).to_vec();
    let m = messages(&b).next().unwrap().unwrap();
    assert_eq!((m.ty, m.flags, m.seq), (0x0a07, NLM_F_REQUEST | NLM_F_DUMP, 42));
    let (fam, _, mut a) = nfgen(m.payload).unwrap();
    assert_eq!(fam, 2);
    assert_eq!(a.next().unwrap().unwrap().str().unwrap(), "nat");
    assert_eq!(b.len() % 4, 0);
}

#[test]
fn dump_errors_interrupts_and_stale_answers() {
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    // A stale message of an earlier request is skipped; DONE ends the dump.
    let mut s = Session::new(
        Fake::new(|r| {
            let p = nfgen_payload(2, 0, &[]);
            vec![
                Ok([
                    msg(0x0a03, NLM_F_MULTI, r.seq + 7, &p),
                    msg(0x0a03, NLM_F_MULTI, r.seq, &p),
                ]
                .concat()),
                Ok(done(r.seq)),
            ]
        }),
        deadline,
    );
    let mut n = 0;
    s.dump(&mut Request::new(0x0a04, NLM_F_DUMP, 2), |_| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 1);
    // Batched reads give the same messages, across datagrams.
    let mut s = Session::new(
        Fake::new(|r| {
            let p = nfgen_payload(2, 0, &[]);
            vec![
                Ok(msg(0x0a03, NLM_F_MULTI, r.seq, &p)),
                Ok(msg(0x0a03, NLM_F_MULTI, r.seq, &p)),
                Ok(msg(0x0a03, NLM_F_MULTI, r.seq, &p)),
                Ok(done(r.seq)),
            ]
        }),
        deadline,
    );
    let mut n = 0;
    s.dump_batched(&mut Request::new(0x0a04, NLM_F_DUMP, 2), 2, |_| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 3);
    // DUMP_INTR.
    let mut s = Session::new(
        Fake::new(|r| vec![Ok(msg(0x0a03, NLM_F_MULTI | NLM_F_DUMP_INTR, r.seq, &[2, 0, 0, 0]))]),
        deadline,
    );
    let e = s
        .dump(&mut Request::new(0x0a04, NLM_F_DUMP, 2), |_| Ok(()))
        .unwrap_err();
    assert!(matches!(e, NlError::Changed(_)), "{e}");
    // EPERM from the kernel, ENOBUFS from the socket.
    let mut s = Session::new(Fake::new(|r| vec![Ok(error(r.seq, 1))]), deadline);
    let e = s
        .dump(&mut Request::new(0x0a04, NLM_F_DUMP, 2), |_| Ok(()))
        .unwrap_err();
    assert_eq!(e, NlError::Kernel { errno: 1 });
    assert!(
        e.to_string().contains("EPERM") && e.to_string().contains("CAP_NET_ADMIN"),
        "{e}"
    );
    let mut s = Session::new(
        Fake::new(|_| {
            vec![Err(NlError::Os {
                op: "receiving from netlink",
                errno: 105,
            })]
        }),
        deadline,
    );
    let e = s.request(&mut Request::new(0x0a10, NLM_F_REQUEST, 0)).unwrap_err();
    assert!(
        e.to_string().contains("ENOBUFS") && e.to_string().contains("overflowed"),
        "{e}"
    );
    // A dump that failed in the kernel reports its errno in DONE.
    let mut s = Session::new(
        Fake::new(|r| vec![Ok(msg(NLMSG_DONE, NLM_F_MULTI, r.seq, &(-2i32).to_ne_bytes()))]),
        deadline,
    );
    let e = s
        .dump(&mut Request::new(0x0a04, NLM_F_DUMP, 2), |_| Ok(()))
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
}
