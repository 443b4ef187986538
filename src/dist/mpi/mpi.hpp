// MPI for expert parallelism: the optional mxmoe_mpi component (link mxmoe_mpi beside the
// library; libmxmoe itself never links MPI). Built in the source tree for the mxmoe command,
// the tests and the benches; neither it nor this header is installed. This header does not
// include <mpi.h>: a host that already uses MPI passes its communicator as a Fortran handle
// (MPI_Comm_c2f(comm) in C and C++, comm.py2f() in mpi4py), which is a plain int.
#pragma once

#include <memory>

#include "mxmoe/communicator.hpp"

namespace mxmoe::mpi {

// MPI initialised for the object's lifetime (MPI_Init_thread, MPI_THREAD_FUNNELED: only the
// thread that calls the layer talks to MPI; the layer's workers never do). When MPI is already
// initialised (the host did it), it neither initialises nor finalises.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // Ends every process of the job with `code` (MPI_Abort). After a CommError the others may
  // still wait for this process: the error must end the whole job, not this rank alone.
  [[noreturn]] static void abort(int code) noexcept;

 private:
  bool owns_ = false;
};

// A Communicator over a duplicate of MPI_COMM_WORLD (MPI must be initialised) whose errors
// return instead of aborting, so that a failed or silent peer becomes a CommError naming it.
std::unique_ptr<Communicator> world(CommOptions options = {});
// The same over any communicator of the host, given as its Fortran handle (MPI_Fint).
std::unique_ptr<Communicator> from_fortran_handle(int handle, CommOptions options = {});

// Ranks of `comm` on this node (MPI_COMM_TYPE_SHARED): ranks of one host share its cores.
int ranks_on_this_node(const Communicator& comm);

}  // namespace mxmoe::mpi
