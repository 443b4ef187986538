# The decode model of docs/DISTRIBUTED.md: DeepSeek-V4-Flash's MoE layers across N hosts.
# Per layer and decode step: every rank streams the routed experts its tokens touch, plus the
# shared expert, from DRAM at ETA x its read bandwidth; the busiest rank's link carries its
# rows out and its per-slot outputs back; 3 exchanges cost ALPHA each. Tokens are spread over
# the ranks, routing is uniform (Monte Carlo), attention is not counted: upper bounds.
# Prints the table rows of docs/DISTRIBUTED.md: | DRAM GB/s | batch | hosts | tokens/s (network
# share) at 25, 100 and 400 Gb/s | layer us at 100 Gb/s |.
import random
E,k,H,L=256,6,4096,43
EXP=3*H*2048*17/32          # bytes of one routed expert (MXFP4 + E8M0)
SHARED=EXP                  # the shared expert, same width
ETA=0.8                     # fraction of DRAM read bandwidth decode streams at (measured 0.65-0.88)
ALPHA=10e-6                 # seconds per exchange (latency); 3 exchanges per layer
random.seed(1)
def step(N,B,dram,net_gbit,trials=None):
    random.seed(N*1000+B)
    trials=trials or (3000 if B==1 else 300)
    comm_t=0
    bw=ETA*dram*1e9; net=net_gbit/8*1e9
    tot=0
    for _ in range(trials):
        touched=[set() for _ in range(N)]
        sent=[0.0]*N   # bytes each rank sends (dispatch of its tokens + returns of slots it computed)
        recv=[0.0]*N
        for t in range(B):
            home=t%N
            experts=random.sample(range(E),k)
            owners=set()
            for e in experts:
                o=e*N//E
                touched[o].add(e)
                if o!=home:
                    owners.add(o)
                    sent[home]+=8; recv[o]+=8
                    sent[o]+=4*H; recv[home]+=4*H      # per-slot return
            for o in owners:
                sent[home]+=4*H; recv[o]+=4*H          # the row, once per owner
        homes=set(t%N for t in range(B))
        comp=max(len(touched[r])*EXP+(SHARED if r in homes else 0) for r in range(N))/bw
        link=max(max(sent),max(recv))/net if N>1 else 0
        c=link+(3*ALPHA if N>1 else 0)
        comm_t+=c
        tot+=comp+c
    t_layer=tot/trials
    return B/(L*t_layer), t_layer, comm_t/tot
for dram in [200, 28]:
  pass
  for B in [1,64]:
    for N in [1,2,4,8,16]:
        rs=[step(N,B,dram,g) for g in [25,100,400]]
        print(f"| {dram} | {B} | {N} | " + " | ".join(f"{r[0]:.0f} ({r[2]*100:.0f}%)" for r in rs) + f" | {rs[1][1]*1e6:.0f} |")
