/* Preloaded (LD_PRELOAD) into one rank by CliMpi.ARankStuckBeforeFinalizeEndsTheOthersAtTheDeadline:
 * its MPI_Finalize never reaches MPI, as a rank stopped after the command's last collective would
 * not, so the other ranks wait in their own MPI_Finalize (Open MPI's ends with a fence). */
#include <unistd.h>

int MPI_Finalize(void) {
  sleep(120);
  return 0;
}
